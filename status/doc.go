// Package status carries a call's outcome: a code, a message and optional
// protobuf details. Errors returned by handlers and by client calls are
// *Status errors; Code and FromError read them back, mapping context errors
// to Canceled and DeadlineExceeded and anything else to Unknown. A status
// error of gRPC-go's is read as one too (found by its GRPCStatus method,
// without importing gRPC-go), and FromProto, Proto and ErrorProto convert
// to and from google.rpc.Status, as gRPC-go's.
//
// It knows codes and protobuf's Any; it must not know about connections,
// transports or the wire format.
package status
