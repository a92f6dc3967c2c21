#include "cli/app.h"

int main(int argc, char** argv) {
  return ifusim::cli::run(argc, argv);
}
