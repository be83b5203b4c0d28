// Headless Chromium (Debian's chromium; scripts/install-test-deps.sh installs it) against a
// dashboard served by a real job: what the page left in its DOM, and a screenshot.
#pragma once

#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "tests/cli_fixture.h"

namespace colony::testing {

// Runs headless Chromium on `url` with `args` (--dump-dom or --screenshot=FILE), its profile and
// output under `dir`, and returns its stdout; its stderr (where the page's console messages go)
// is put in `log`.
inline std::string chromium(const std::filesystem::path& dir, const std::string& url,
                            const std::string& args, std::string& log) {
  const std::string out = (dir / "chromium.out").string(), err = (dir / "chromium.err").string();
  // The page polls every 250 ms of virtual time; 8 s of it is about 30 polls.
  const std::string cmd =
      "timeout 120 chromium --headless --no-sandbox --disable-gpu "
      "--no-first-run --user-data-dir=" +
      (dir / "chrome").string() +
      " --enable-logging=stderr --v=0 --virtual-time-budget=8000 "
      "--window-size=1280,1000 " +
      args + " '" + url + "' > " + out + " 2> " + err;
  const int rc = std::system(cmd.c_str());
  log = slurp(err);
  BOOST_REQUIRE_MESSAGE(rc == 0, "chromium failed (" << rc << "; scripts/install-test-deps.sh "
                                                     << "installs it):\n"
                                                     << log);
  return slurp(out);
}

// The value of attribute `attr` of the element whose id is `id` in `dom`; "" when absent.
inline std::string attribute(const std::string& dom, const std::string& id,
                             const std::string& attr) {
  std::smatch m;
  const std::regex element("<[^>]*id=\"" + id + "\"[^>]*>");
  if (!std::regex_search(dom, m, element)) return "";
  const std::string tag = m[0].str();
  const std::regex value(attr + "=\"([^\"]*)\"");
  return std::regex_search(tag, m, value) ? m[1].str() : "";
}

}  // namespace colony::testing
