// SPDX-License-Identifier: MIT
//
// A probe variant that runs a chunkpipe pipeline over the probes' 1 GiB
// each way: each pass one run_async, the timing stream joined through the
// ticket (RunTicket::enqueue_wait), the ticket waited for after the pass.
#pragma once

#include <chunkpipe/pipeline.cuh>

#include "probe.hpp"

#include <memory>
#include <optional>
#include <string>

namespace probe {

/// `pipe` must outlive the variant.
template <class Pipe>
Variant pipeline_variant(std::string name, Pipe& pipe, const Host& host) {
  auto ticket = std::make_shared<std::optional<chunkpipe::RunTicket>>();
  Pipe* p = &pipe;
  const Host* h = &host;
  return {std::move(name),
          [=] {
            ticket->emplace(p->run_async(chunkpipe::pinned(chunkpipe::host_span(h->in, Host::total)),
                                         chunkpipe::pinned(chunkpipe::host_span(h->out, Host::total))));
          },
          [=](cudaStream_t s) { (*ticket)->enqueue_wait(::cuda::stream_ref(s)); },
          [=] {
            (*ticket)->wait();
            ticket->reset();
          }};
}

}  // namespace probe
