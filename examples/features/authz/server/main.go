// Command server is the server of the authz example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/authz"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
)

func main() { cli.Main(authz.Server) }
