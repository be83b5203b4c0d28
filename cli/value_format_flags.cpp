#include "cli/value_format_flags.h"

#include <tuple>

namespace colony::cli {

void add_value_format_flags(CLI::App* cmd, ValueFormatFlags& f) {
  cmd->add_option("--wire-format", f.wire,
                  "How pull replies and pushes carry rows and gradients: fp32; bf16 or fp16 (half "
                  "the bytes; fp16 saturates at +-65504); or int8 (a byte a value and a scale a "
                  "row); rows rounded to the nearest, gradients stochastically")
      ->capture_default_str();
  cmd->add_option("--push-format", f.push,
                  "How pushes carry gradients, when not as --wire-format says: fp32, bf16, fp16 "
                  "or int8 (e.g. --wire-format int8 --push-format bf16: rows in a byte a value, "
                  "gradients in two)");
  cmd->add_option(
         "--error-feedback", f.error_feedback,
         "Rows (per pushing worker or aggregator) whose rounding error is kept and added "
         "to their next push, which then rounds to the nearest: nothing of a gradient is "
         "lost, only delayed; 4 bytes a value of each such row. 0: none, every push rounds "
         "stochastically. Needs a --push-format (or --wire-format) other than fp32")
      ->check(CLI::Range(uint64_t{0}, error_feedback_rows_max))
      ->capture_default_str();
  cmd->add_option("--row-format", f.row,
                  "How the shards keep rows' values: fp32; bf16 or fp16 (2 bytes a value); or "
                  "int8 (a byte a value and a scale a row); rounded stochastically, in memory and "
                  "on disk (the tiered store's cache keeps fp32)")
      ->capture_default_str();
  cmd->add_option("--state-format", f.state,
                  "How the shards keep the optimizer's state of a row: fp32, bf16, fp16 or int8, "
                  "as --row-format")
      ->capture_default_str();
  cmd->add_option("--part-bytes", f.part_bytes,
                  "The largest message of a pull or push: a larger request to a shard travels in "
                  "parts of at most this many bytes")
      ->check(CLI::Range(part_bytes_min, part_bytes_max))
      ->capture_default_str();
}

const char* message_flag(const ValueFormats& f) {
  if (f.wire != ValueFormat::fp32) return "--wire-format";
  if (f.push != ValueFormat::fp32) return "--push-format";
  if (f.part_bytes != part_bytes_default) return "--part-bytes";
  if (f.error_feedback_rows != 0) return "--error-feedback";
  return nullptr;
}

const char* row_flag(const ValueFormats& f) {
  if (f.row != ValueFormat::fp32) return "--row-format";
  if (f.state != ValueFormat::fp32) return "--state-format";
  return nullptr;
}

Expected<ValueFormats> parse_value_format_flags(const ValueFormatFlags& f,
                                                OptimizerKind optimizer) {
  ValueFormats out;
  out.part_bytes = f.part_bytes;
  for (auto [flag, text, format] : {std::tuple{"--wire-format", &f.wire, &out.wire},
                                    std::tuple{"--row-format", &f.row, &out.row},
                                    std::tuple{"--state-format", &f.state, &out.state}}) {
    auto parsed = parse_value_format(*text, "format");
    if (!parsed) return Status::invalid_input(std::string(flag) + ": " + parsed.status().message());
    *format = *parsed;
  }
  out.push = out.wire;
  if (!f.push.empty()) {
    auto parsed = parse_value_format(f.push, "format");
    if (!parsed) return Status::invalid_input("--push-format: " + parsed.status().message());
    out.push = *parsed;
  }
  out.error_feedback_rows = f.error_feedback;
  if (out.error_feedback_rows > 0 && out.push == ValueFormat::fp32)
    return Status::invalid_input(
        "--error-feedback: pushes in fp32 lose nothing to feed back; give --push-format or "
        "--wire-format bf16, fp16 or int8");
  if (Status s = check_state_format(optimizer, out.state); !s.ok()) return s;
  return out;
}

void report_value_formats(nlohmann::json& report, const ValueFormats& f) {
  report["wire_format"] = to_string(f.wire);
  report["push_format"] = to_string(f.push);
  report["error_feedback_rows"] = f.error_feedback_rows;
  report["part_bytes"] = f.part_bytes;
  report["row_format"] = to_string(f.row);
  report["state_format"] = to_string(f.state);
}

}  // namespace colony::cli
