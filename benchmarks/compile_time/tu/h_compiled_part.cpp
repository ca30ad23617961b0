// SPDX-License-Identifier: MIT
// Row (h): the compiled part of chunkpipe (what chunkpipe::compiled builds),
// compiled once per program; rows (f) and (g) leave this code to it.
#include <chunkpipe/compiled.hpp>
