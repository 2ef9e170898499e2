// Package manual is a resolver whose state a test sets by hand, as gRPC-go's
// resolver/manual: a test builds one with NewBuilderWithScheme, gives it to
// the client (registered, or through a client option), and then calls
// UpdateState and ReportError to add, remove and fail backends at the moment
// it chooses. It exists for tests of clients and balancers.
package manual
