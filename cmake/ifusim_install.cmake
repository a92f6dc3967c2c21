# Installs the C++ library for C++ users: `cmake --install BUILD --prefix P --component devel`
# puts the headers (P/include/ifusim/{core,data,io,stages,pipeline}/...), the static libraries
# and a package config (P/lib/cmake/ifusim), so that a project can
#   find_package(ifusim REQUIRED)
#   target_link_libraries(app PRIVATE ifusim::ifusim)
# (docs/cpp_library.md). The `runtime` component is the `ifusim` program and the telescope and
# pipeline presets (P/share/ifusim/configs). Everything here is in one of these two components,
# so that a package built from another component installs none of it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(IFUSIM_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/ifusim" CACHE STRING
  "Where the package config of the C++ library is installed (relative to the prefix)")

# Installed, the headers' root is include/ifusim (the build tree's is the project's root); the
# headers need C++20.
target_include_directories(ifusim_options INTERFACE
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/ifusim>)
target_compile_features(ifusim_options INTERFACE cxx_std_20)

# ifusim::ifusim: the whole library (the pipeline layer brings every lower one).
add_library(ifusim_library INTERFACE)
target_link_libraries(ifusim_library INTERFACE ifusim_pipeline)
set_target_properties(ifusim_library PROPERTIES EXPORT_NAME ifusim)
add_library(ifusim::ifusim ALIAS ifusim_library)

install(TARGETS ifusim_options ifusim_thrust ifusim_core ifusim_data ifusim_io ifusim_stages
                ifusim_pipeline ifusim_library
  EXPORT ifusimTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel)
# Every header and inline kernel file of the layers, keeping the folders (under include/ifusim,
# the installed targets' include directory, above).
install(DIRECTORY core data io stages pipeline
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ifusim COMPONENT devel
  FILES_MATCHING PATTERN "*.h" PATTERN "*.inl" PATTERN "*.cuh")
install(EXPORT ifusimTargets NAMESPACE ifusim:: DESTINATION ${IFUSIM_INSTALL_CMAKEDIR}
  COMPONENT devel)

configure_package_config_file(cmake/ifusimConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ifusimConfig.cmake INSTALL_DESTINATION ${IFUSIM_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ifusimConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ifusimConfig.cmake
              ${PROJECT_BINARY_DIR}/ifusimConfigVersion.cmake
  DESTINATION ${IFUSIM_INSTALL_CMAKEDIR} COMPONENT devel)

install(TARGETS ifusim RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(DIRECTORY configs/telescopes configs/pipelines
  DESTINATION ${CMAKE_INSTALL_DATADIR}/ifusim/configs COMPONENT runtime)
