// The `colony` subcommands. Each registers its flags on the app and returns the function
// that runs it once the command line has parsed; that function returns the exit code
// (0 success, 2 bad usage or input, 1 any other failure).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "common/status.h"

namespace colony::cli {

using Runner = std::function<int()>;

Runner add_gen(CLI::App& app);
Runner add_train(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_keygen(CLI::App& app);
Runner add_sim(CLI::App& app);

// Prints "colony: error: <message>" and returns the exit code for the Status.
int fail(const Status& status);
// Bytes of peak resident memory of this process.
uint64_t peak_rss_bytes();
// Writes `json_text` to `path` (with a newline); false (and a message) when it cannot.
bool write_report(const std::string& path, const std::string& json_text);

}  // namespace colony::cli
