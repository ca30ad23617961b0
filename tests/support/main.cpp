// SPDX-License-Identifier: MIT
// The one Catch2 main, and Catch2's implementation, compiled once by the
// host compiler (about 20 s: Catch2 2.x compiles all of itself here) into
// chunkpipe_test_main, which every test program links: the CPU tests, the
// GPU tests and the ThreadSanitizer builds.
//
// A program may decide first whether its tests can run at all: where it
// defines chunkpipe_test_gate (the GPU tests do, in gpu_main.cpp), main
// calls it, and a result of 0 or more is the program's exit status without
// running Catch2. Declared weak, so that a program without one links.
#if __has_include(<catch2/catch_session.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

extern "C" int chunkpipe_test_gate(int argc, char* argv[]) __attribute__((weak));

int main(int argc, char* argv[]) {
  if (chunkpipe_test_gate != nullptr) {
    const int status = chunkpipe_test_gate(argc, argv);
    if (status >= 0) return status;
  }
  return Catch::Session().run(argc, argv);
}
