// The `colony` subcommands. Each registers its flags on the app and returns the function
// that runs it once the command line has parsed; that function returns the exit code
// (0 success, 2 bad usage or input, 1 any other failure).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "data/reader.h"
#include "storage/store_spec.h"

namespace colony::cli {

using Runner = std::function<int()>;

Runner add_gen(CLI::App& app);
Runner add_train(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_keygen(CLI::App& app);
Runner add_coordinator(CLI::App& app);
Runner add_ps(CLI::App& app);
Runner add_worker(CLI::App& app);
Runner add_checkpoint(CLI::App& app);
Runner add_export(CLI::App& app);
Runner add_sim(CLI::App& app);
Runner add_profile(CLI::App& app);

// For a flag's number that must be above 0, or 0 or above, and finite: CLI11's PositiveNumber
// and NonNegativeNumber (named as theirs in --help: POSITIVE, NONNEGATIVE), refusing a value
// with a message a user can read ("--epochs: must be a number above 0, not 0") where theirs
// print their range to the 309 digits of the largest double (and let nan through).
CLI::Validator positive_number();
CLI::Validator non_negative_number();

// Adds `--config FILE` to a subcommand: a TOML file whose keys are the subcommand's flag names
// without the dashes (e.g. `shards = 2`, `insecure = true`, `test = "/data/test.libsvm"`).
// Flags given on the command line win over the file. main() applies it (apply_config_file).
void add_config_option(CLI::App* cmd);
// Reads the --config file of `cmd`, if one was given, into the flags not set on the command line.
// Throws CLI::ParseError (exit 2) naming the file for a file that cannot be read or parsed, a
// key that is not a flag of `cmd`, or a value the flag refuses.
void apply_config_file(CLI::App* cmd);

// Adds `--format auto|libsvm|libffm|criteo` (the input files' text format; auto: detected from
// the content and a .libffm name) to a subcommand, setting `format` (ReaderOptions::format).
void add_format_option(CLI::App* cmd, std::optional<DataFormat>& format);

// Adds the tiered store's `--eviction lfu|lru` and `--read-ahead` to a subcommand (colony train,
// colony ps), setting `eviction` and `read_ahead`.
void add_tiered_store_flags(CLI::App* cmd, std::string& eviction, bool& read_ahead);
// Gives `store` those flags' values (StoreSpec::policy, set_read_ahead). Fails with invalid_input
// naming --read-ahead when the store is not tiered.
Status set_tiered_store_flags(StoreSpec& store, const std::string& eviction, bool read_ahead);

// Parses "replicated:K" given to `flag` (colony coordinator's --durability): K replicas of each
// shard. Fails with invalid_input naming the flag and its text
// for anything else, or K outside 2..max.
Expected<uint32_t> parse_replicated(const std::string& flag, const std::string& text, uint32_t max);

// Prints "colony: error: <message>" and returns the exit code for the Status.
int fail(const Status& status);
// Bytes of peak resident memory of this process.
uint64_t peak_rss_bytes();
// Writes `text` to `path` (with a newline); false, and a message naming `flag` and the path,
// when it cannot.
bool write_file(const std::string& flag, const std::string& path, const std::string& text);
// write_file("--report", path, json_text).
bool write_report(const std::string& path, const std::string& json_text);

}  // namespace colony::cli
