#pragma once

// Whether this test binary is instrumented by AddressSanitizer (CI's sanitizer build, which runs
// every test a few times slower). The slowest tests, many whole runs of one configuration, check
// fewer block splits there: the splits exercise the same code, and the Release build runs them
// all. GCC defines __SANITIZE_ADDRESS__; clang answers __has_feature.
namespace ifusim::test {
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif
}  // namespace ifusim::test
