package main

import (
	"fmt"
	"os"

	"google.golang.org/protobuf/compiler/protogen"

	"github.com/rdmarpc/rdmarpc/codegen"
)

func main() {
	if len(os.Args) == 2 {
		switch os.Args[1] {
		case "--version", "-version":
			fmt.Println(codegen.PluginName, codegen.Version)
			os.Exit(0)
		case "--help", "-h":
			fmt.Println("protoc-gen-go-rdmarpc is a protoc plugin: run it through protoc --go-rdmarpc_out=DIR or buf generate,")
			fmt.Println("or use `rdmarpc gen`, which needs no protoc. Options (--go-rdmarpc_opt): paths=import|source_relative,")
			fmt.Println("module=PREFIX, M<file.proto>=<Go import path>, annotate_code, require_unimplemented_servers=true|false,")
			fmt.Println("package_suffix=SUFFIX (the stubs in a package of their own, importing the messages' package).")
			os.Exit(0)
		}
	}
	opts := codegen.DefaultOptions()
	opts.ProtogenOptions().Run(func(gen *protogen.Plugin) error {
		return codegen.Generate(gen, opts)
	})
}
