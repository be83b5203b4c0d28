#include "monitor/http_server.h"

#include <sys/socket.h>

#include <thread>

#include <httplib.h>

#include "monitor/registry.h"

namespace colony::monitor {

struct HttpServer::Impl {
  httplib::Server server;
  std::shared_ptr<const Registry> registry;
  std::string host;
  int port = 0;
  std::thread thread;
};

Expected<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& host, int port,
                                                        std::shared_ptr<const Registry> registry,
                                                        bool dashboard) {
  if (port < 0 || port > 65535)
    return Status::invalid_input(fmt::format("--metrics-port {}: not a port (0-65535)", port));
  auto impl = std::make_unique<Impl>();
  impl->registry = std::move(registry);
  impl->host = host;
  // SO_REUSEADDR only (a restarted job can take its port back at once), not cpp-httplib's
  // default SO_REUSEPORT, which would let a second job share the port and half the scrapes.
  impl->server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  const Registry* reg = impl->registry.get();
  impl->server.Get("/metrics", [reg](const httplib::Request&, httplib::Response& res) {
    res.set_content(reg->render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  if (dashboard)
    impl->server.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(dashboard_html(), "text/html; charset=utf-8");
    });
  impl->port = port == 0 ? impl->server.bind_to_any_port(host)
                         : (impl->server.bind_to_port(host, port) ? port : -1);
  if (impl->port < 0)
    return Status::invalid_input(fmt::format(
        "metrics endpoint {}:{}: cannot listen there (port in use, or not an address of this "
        "machine)",
        host, port));
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->server.listen_after_bind(); });
  // stop() does nothing until the server runs: wait for that, so the destructor can't hang.
  while (!impl->server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  impl_->server.stop();
  impl_->thread.join();
}

int HttpServer::port() const {
  return impl_->port;
}

std::string HttpServer::url() const {
  return fmt::format("http://{}:{}", impl_->host, impl_->port);
}

}  // namespace colony::monitor
