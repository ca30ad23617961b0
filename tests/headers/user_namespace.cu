// SPDX-License-Identifier: MIT
// user_namespace.cpp compiled by nvcc, with every public header.
#include "user_namespace.cpp"
