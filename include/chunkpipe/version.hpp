// SPDX-License-Identifier: MIT
/// \file
/// The version of chunkpipe: the one place it is written. CMake reads it
/// from here.
#pragma once

/// Major version. The installed package accepts a find_package() that asks
/// for the same major and minor version (CMake's SameMinorVersion).
#define CHUNKPIPE_VERSION_MAJOR 0
/// Minor version (see CHUNKPIPE_VERSION_MAJOR).
#define CHUNKPIPE_VERSION_MINOR 1
/// Patch version (see CHUNKPIPE_VERSION_MAJOR).
#define CHUNKPIPE_VERSION_PATCH 0

/// The version as one number, major * 10000 + minor * 100 + patch, for `#if`.
#define CHUNKPIPE_VERSION                                                  \
  (CHUNKPIPE_VERSION_MAJOR * 10000 + CHUNKPIPE_VERSION_MINOR * 100 +       \
   CHUNKPIPE_VERSION_PATCH)
