// Command switchboard is the Switchboard operator. Its subcommands are:
//
//	manager   run the controllers, the connector pool and the catalogue
//	bridge    serve a stdio MCP server over Streamable HTTP, one process per session
//	install   copy this binary to a path (the init container of stdio server pods)
//	await     wait until a URL answers 200 OK (the postStart hook of stdio server pods)
//	dev       run a local control plane, the manager and demo MCP servers (make dev)
//	demo-server  serve one of the demo MCP servers dev uses
//	import    print an MCPServer manifest for an MCP registry server.json
//
// Run `switchboard <subcommand> --help` for the flags of each.
package main

import (
	"fmt"
	"os"
)

// subcommands maps each subcommand name to its entry point, which receives the arguments
// after the name and returns the process exit code.
var subcommands = map[string]func(args []string) int{
	"manager":     runManager,
	"bridge":      runBridge,
	"install":     runInstall,
	"await":       runAwait,
	"dev":         runDev,
	"demo-server": runDemoServer,
	"import":      runImport,
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	run, ok := subcommands[os.Args[1]]
	if !ok {
		if os.Args[1] != "-h" && os.Args[1] != "--help" && os.Args[1] != "help" {
			fmt.Fprintf(os.Stderr, "switchboard: unknown subcommand %q\n\n", os.Args[1])
		}
		usage()
		os.Exit(2)
	}
	os.Exit(run(os.Args[2:]))
}

func usage() {
	fmt.Fprint(os.Stderr, `Usage: switchboard <subcommand> [flags]

Subcommands:
  manager   run the Switchboard controllers (the in-cluster operator)
  bridge    serve a stdio MCP server over Streamable HTTP, one process per session
  install   copy this binary to a path (the init container of stdio server pods)
  await     wait until a URL answers 200 OK (the postStart hook of stdio server pods)
  dev       run a local control plane, the manager and demo MCP servers (make dev)
  demo-server  serve one of the demo MCP servers dev uses (stdio, or HTTP with --http)
  import    print an MCPServer manifest for an MCP registry server.json (a file or a registry entry)

Run 'switchboard <subcommand> --help' for the flags of a subcommand.
`)
}
