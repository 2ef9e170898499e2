// Package attributes is an immutable key-value map that resolvers attach to
// addresses and states, in the shape of gRPC-go's attributes package: New,
// WithValue, Value and Equal. Keys should be values of unexported types, as
// with context keys, so packages cannot collide.
package attributes
