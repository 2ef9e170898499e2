// Command server is the server of the authentication example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/authentication"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
)

func main() { cli.Main(authentication.Server) }
