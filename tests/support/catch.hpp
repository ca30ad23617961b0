// SPDX-License-Identifier: MIT
// Catch2 2.x or 3.x, whichever is installed: the tests use only macros both
// provide (TEST_CASE, SECTION, REQUIRE, CHECK, REQUIRE_THROWS_AS, ...).
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#else
#include <catch2/catch.hpp>
#endif
