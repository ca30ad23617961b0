// SPDX-License-Identifier: MIT
// Row (i): row d written to compile fastest: the pipeline header and the
// Filter's GPU side instead of the umbrella (and, by the script, compiled
// with CHUNKPIPE_COMPILED).
#include <chunkpipe/chunked_pipeline.cuh>
#include <chunkpipe/filter.cuh>

#include "reduce_filter_body.hpp"
