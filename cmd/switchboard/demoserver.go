package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/switchboard-mcp/switchboard/internal/demo"
)

// runDemoServer serves one of the demo MCP servers `switchboard dev` uses: on stdio by
// default, or over HTTP (Streamable HTTP at /mcp, legacy SSE at /sse) with --http.
func runDemoServer(args []string) int {
	fs := flag.NewFlagSet("demo-server", flag.ContinueOnError)
	httpAddr := fs.String("http", "", "Serve over HTTP on this address instead of stdio, such as 127.0.0.1:8080.")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: switchboard demo-server [--http ADDR] %v\n\n", demo.Kinds)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	kind, err := demo.ParseKind(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "switchboard demo-server: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *httpAddr == "" {
		err = demo.ServeStdio(ctx, kind)
	} else {
		err = serveDemoHTTP(ctx, kind, *httpAddr)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "switchboard demo-server: %v\n", err)
		return 1
	}
	return 0
}

func serveDemoHTTP(ctx context.Context, kind demo.Kind, addr string) error {
	mux := http.NewServeMux()
	mux.Handle("/mcp", demo.StreamableHandler(kind, ""))
	mux.Handle("/sse", demo.SSEHandler(kind))
	server := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}()
	if err := server.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
