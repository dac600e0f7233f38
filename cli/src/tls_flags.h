#pragma once
// How a process joins the cluster's gRPC: the routers it registers with (`strata worker`,
// `strata kvstore`: --router, --router-service; proto/registry_client.h), and the cluster mTLS
// flags of every process that serves or dials cluster gRPC (`strata router`, `strata worker`,
// `strata kvstore`): --tls-ca, --tls-cert, --tls-key (proto/cluster_tls.h); and HTTPS on the
// HTTP port of `strata router` and `strata worker`: --http-tls-cert, --http-tls-key,
// --http-tls-client-ca (http/server.h, TlsOptions).
#include <string>

#include "absl/status/status.h"
#include "args.h"
#include "strata/http/server.h"
#include "strata/proto/cluster_tls.h"

namespace strata::cli {

// --router (a host:port list) and --router-service (a name resolving to every router).
void AddRouterFlags(ArgParser& parser, std::string* routers, std::string* service);

void AddTlsFlags(ArgParser& parser, proto::TlsFiles* files);

// With the flags given: checks the files, makes them the process's cluster credentials and says
// so on stderr (one line); without: plaintext. InvalidArgument (naming the flag and the
// file) for an incomplete set or files that do not check out.
absl::Status ApplyTlsFlags(const proto::TlsFiles& files);

void AddHttpTlsFlags(ArgParser& parser, http::TlsOptions* tls);

// InvalidArgument for a certificate without its key or the reverse, or a client CA without
// both. The files themselves are loaded (and checked) by the HTTP server.
absl::Status CheckHttpTlsFlags(const http::TlsOptions& tls);

}  // namespace strata::cli
