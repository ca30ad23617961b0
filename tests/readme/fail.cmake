# SPDX-License-Identifier: MIT
# A test that fails with MESSAGE (cmake -DMESSAGE=... -P fail.cmake).
message(FATAL_ERROR "${MESSAGE}")
