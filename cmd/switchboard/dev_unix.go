//go:build unix

package main

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// watchOutputReader stops the run through stop once f, dev's standard output, is a pipe or
// socket whose reader has gone: `make dev | tee dev.log` with tee ended first. Nothing
// needs to be written for dev to notice, so it stops its control plane at once instead
// of leaving it running until the next line it prints. It returns when ctx ends, and at
// once when f is a terminal or a file, which no reader can close.
func watchOutputReader(ctx context.Context, f *os.File, stop context.CancelCauseFunc) {
	info, err := f.Stat()
	if err != nil || info.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		var revents int16
		var pollErr error
		// No events asked for: poll reports POLLERR on a pipe whose read end is closed
		// and POLLHUP on a socket whose peer has gone, whatever is asked.
		if err := raw.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: 0}} //nolint:gosec // a file descriptor fits in int32
			_, pollErr = unix.Poll(fds, 500)
			revents = fds[0].Revents
		}); err != nil {
			return
		}
		if pollErr != nil && !errors.Is(pollErr, unix.EINTR) {
			return
		}
		if revents&(unix.POLLERR|unix.POLLHUP) != 0 {
			stop(errDevOutputClosed)
			return
		}
	}
}
