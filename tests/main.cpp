#define CATCH_CONFIG_RUNNER
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);  // the pipeline's progress logs would drown the report
  return Catch::Session().run(argc, argv);
}
