// Package authz authorizes a server's calls by a policy in gRPC's
// authorization policy format (gRFC A43), as gRPC-go's authz package does:
// NewStatic and NewFileWatcher return interceptors to chain after the ones
// that authenticate, and a call no rule allows fails PermissionDenied.
//
// The policy is JSON:
//
//	{
//	  "name": "authz",
//	  "deny_rules":  [RULE, ...],
//	  "allow_rules": [RULE, ...]
//	}
//
// where a RULE is
//
//	{
//	  "name": "allow_echo",
//	  "source":  {"principals": ["spiffe://example.org/client", "*.example.org", ...]},
//	  "request": {"paths": ["/pkg.Service/Method", "/pkg.Service/*", ...],
//	              "headers": [{"key": "x-role", "values": ["admin", "ops-*"]}, ...]}
//	}
//
// A rule matches a call when each part it gives matches: a principal of the
// peer's verified TLS certificate (its URI SANs, then DNS SANs, then its
// subject) equals one of "principals", a path equals the full method
// name, and each header's key is in the call's incoming metadata with a
// value (several joined by ",") equal to one of "values". A string may
// start or end with "*" (suffix or prefix match); "*" alone matches any
// value that is there, and as a principal any authenticated peer. A call
// that a deny rule matches is refused; else one an allow rule matches is
// let through; else it is refused. "allow_rules" must be there; header keys
// that are pseudo-headers, grpc- keys or HTTP's own ("host", "te", ...) are
// refused, as gRPC-go refuses them.
//
// Missing: audit logging ("audit_logging_options" other than none is an
// error) and the xDS RBAC engine gRPC-go translates the policy into; the
// matching here is written for the policy format alone.
package authz
