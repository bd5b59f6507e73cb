package connector

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawServer accepts connections on loopback and hands each to answer, which writes
// whatever bytes it likes.
func rawServer(t *testing.T, answer func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = conn.Close() }()
				// Read the request's header before answering, as a server would.
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				answer(conn)
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/mcp"
}

// streamGet opens an event-stream GET through a stack for rawURL.
func streamGet(t *testing.T, ctx context.Context, rawURL string) (*http.Response, error) {
	t.Helper()
	endpoint, _ := url.Parse(rawURL)
	stack, err := newHTTPStack(fastConfig(rawURL).withDefaults(), endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stack.close)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	req.Header.Set("Accept", "text/event-stream")
	return stack.client.Do(req)
}

// TestStreamConnectionHeadersAreBounded: a server answering an event-stream GET with
// endless headers gets an error once the header limit is read, not the manager's memory.
func TestStreamConnectionHeadersAreBounded(t *testing.T) {
	rawURL := rawServer(t, func(conn net.Conn) {
		_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
		filler := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
		for range 2 * maxResponseHeaderBytes / len(filler) {
			if _, err := io.WriteString(conn, filler); err != nil {
				return
			}
		}
	})
	resp, err := streamGet(t, context.Background(), rawURL)
	if err == nil {
		_ = resp.Body.Close()
		t.Fatal("a response with 128 KiB of headers was accepted; want an error at the 64 KiB limit")
	}
	if !strings.Contains(err.Error(), "headers exceeded the limit") {
		t.Errorf("error %q; want it to say the headers exceeded the limit", err)
	}
}

// TestStreamConnectionDeliversChunkedEventsAndEndsOnCancel: a chunked event stream is
// read as it arrives; ending the request's context, or closing the body, unblocks a
// read that waits for the next event at once.
func TestStreamConnectionDeliversChunkedEventsAndEndsOnCancel(t *testing.T) {
	rawURL := rawServer(t, func(conn net.Conn) {
		_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		event := "data: {}\n\n"
		_, _ = io.WriteString(conn, strconv.FormatInt(int64(len(event)), 16)+"\r\n"+event+"\r\n")
		_, _ = conn.Read(make([]byte, 1)) // hold the stream open until the client goes
	})

	for _, end := range []string{"cancel", "close"} {
		t.Run(end, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			resp, err := streamGet(t, ctx, rawURL)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			buf := make([]byte, 64)
			n, err := resp.Body.Read(buf)
			if err != nil || string(buf[:n]) != "data: {}\n\n" {
				t.Fatalf("first read %q, %v; want the event", buf[:n], err)
			}
			read := make(chan error, 1)
			go func() {
				_, err := resp.Body.Read(buf)
				read <- err
			}()
			time.Sleep(20 * time.Millisecond) // let the read block on the connection
			if end == "cancel" {
				cancel()
			} else {
				_ = resp.Body.Close()
			}
			select {
			case err := <-read:
				if err == nil {
					t.Error("the waiting read returned no error")
				}
				if end == "cancel" && !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "closed") {
					t.Errorf("read after cancel: %v; want the connection closed", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a read waiting for the next event did not return when the stream ended")
			}
		})
	}
}
