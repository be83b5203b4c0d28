// The flags that say how a job's rows travel and are kept, which `colony train` and
// `colony coordinator` share: --wire-format, --push-format, --error-feedback, --row-format,
// --state-format and --part-bytes
// (docs/getting-started.md, docs/storage.md).
#pragma once

#include <cstddef>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/value_format.h"
#include "ps/optimizer.h"
#include "ps/protocol.h"

namespace colony::cli {

struct ValueFormatFlags {
  std::string wire = "fp32", row = "fp32", state = "fp32";
  std::string push;  // empty: as --wire-format
  uint64_t part_bytes = part_bytes_default;
  uint64_t error_feedback = 0;
};

// Adds the flags to `cmd`.
void add_value_format_flags(CLI::App* cmd, ValueFormatFlags& flags);

// A flag given a value other than its default that a job with no messages (the local engine,
// message_flag) or rows kept in fp32 (a store on disk, row_flag) cannot honour; nullptr when
// none was.
const char* message_flag(const ValueFormats& formats);
const char* row_flag(const ValueFormats& formats);

// The flags' meaning for a job trained by `optimizer`. invalid_input naming the flag for an
// unknown format, for a state format the optimizer cannot keep (check_state_format), or for
// error feedback with fp32 pushes (which lose nothing to feed back).
Expected<ValueFormats> parse_value_format_flags(const ValueFormatFlags& flags,
                                                OptimizerKind optimizer);

// The report keys wire_format, push_format, error_feedback_rows, part_bytes, row_format and
// state_format.
void report_value_formats(nlohmann::json& report, const ValueFormats& formats);

}  // namespace colony::cli
