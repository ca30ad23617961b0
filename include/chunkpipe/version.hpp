// SPDX-License-Identifier: MIT
// chunkpipe version: the one place it is written. CMake reads it from here.
#pragma once

#define CHUNKPIPE_VERSION_MAJOR 0
#define CHUNKPIPE_VERSION_MINOR 1
#define CHUNKPIPE_VERSION_PATCH 0

#define CHUNKPIPE_VERSION                                                  \
  (CHUNKPIPE_VERSION_MAJOR * 10000 + CHUNKPIPE_VERSION_MINOR * 100 +       \
   CHUNKPIPE_VERSION_PATCH)
