#include "ps/protocol.h"

#include <charconv>

namespace colony {

Expected<Consistency> parse_consistency(const std::string& text) {
  if (text == "bsp") return Consistency{ConsistencyKind::bsp, 0};
  if (text == "asp") return Consistency{ConsistencyKind::asp, 0};
  if (text.rfind("ssp:", 0) == 0) {
    uint32_t k = 0;
    const char* begin = text.data() + 4;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(begin, end, k);
    if (ec == std::errc() && ptr == end && begin != end && k <= 1000000)
      return Consistency{ConsistencyKind::ssp, k};
  }
  return Status::invalid_input("consistency \"" + text +
                               "\" is not one of bsp, asp or ssp:K with K in 0..1000000");
}

std::string to_string(const Consistency& c) {
  switch (c.kind) {
    case ConsistencyKind::bsp:
      return "bsp";
    case ConsistencyKind::asp:
      return "asp";
    case ConsistencyKind::ssp:
      return "ssp:" + std::to_string(c.staleness);
  }
  return "?";
}

}  // namespace colony
