// SPDX-License-Identifier: MIT
// Row (d): the README's reduce and filter pipelines in one file, each run
// once, from the umbrella header.
#include <chunkpipe/pipeline.cuh>

#include "reduce_filter_body.hpp"
