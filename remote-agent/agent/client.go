package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/probe"
)

// ErrLost means the agent stopped answering (the connection dropped or its
// heartbeats stopped) before the request ended.
var ErrLost = errors.New("lost the remote agent")

// Client is the controller's side of one agent process.
type Client struct {
	// Hello is what the agent said about itself.
	Hello Hello

	r *bufio.Reader
	w *Writer
}

// Handshake reads the agent's greeting from out and answers on in. A stream that
// does not begin with Magic is a *NotAgentError.
func Handshake(ctx context.Context, out io.Reader, in io.Writer, version string) (*Client, error) {
	c := &Client{r: newReader(out), w: NewWriter(in)}
	type result struct {
		h   Hello
		err error
	}
	done := make(chan result, 1)
	go func() {
		var h Hello
		if err := ReadMagic(c.r); err != nil {
			done <- result{err: err}
			return
		}
		f, err := ReadFrame(c.r)
		if err != nil {
			done <- result{err: fmt.Errorf("read agent hello: %w", err)}
			return
		}
		done <- result{h: h, err: DecodeJSON(f, FrameHello, &h)}
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("agent handshake: %w", ctx.Err())
	}
	if res.err != nil {
		return nil, res.err
	}
	c.Hello = res.h
	if c.Hello.Protocol != Protocol {
		return nil, fmt.Errorf("%w: the agent speaks protocol %d, this controller %d", ErrVersion, c.Hello.Protocol, Protocol)
	}
	if err := c.w.WriteRaw([]byte(Magic)); err != nil {
		return nil, err
	}
	if err := c.w.WriteJSON(FrameHello, Hello{Protocol: Protocol, Version: version}); err != nil {
		return nil, err
	}
	return c, nil
}

// ErrVersion means the agent is not the one this controller ships.
var ErrVersion = errors.New("agent version mismatch")

// ClientIO is where a remote run's streams and events go.
type ClientIO struct {
	Stdin          io.Reader // nil: no input
	Stdout, Stderr io.Writer
	Signals        <-chan os.Signal
	// Winsize, if set, is asked for the terminal size on start and on SIGWINCH.
	Winsize func() (rows, cols uint16, ok bool)
	OnEvent func(event.Event)
	OnStart func(Started)
}

// Run sends a run request and carries its streams until the agent's exit frame.
// When the agent goes silent or the stream breaks, the error wraps ErrLost.
func (c *Client) Run(ctx context.Context, req RunRequest, cio ClientIO) (Exit, error) {
	if err := c.w.WriteJSON(FrameRequest, Request{Kind: KindRun, Run: &req}); err != nil {
		return Exit{}, fmt.Errorf("%w: send the run: %v", ErrLost, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	if cio.Stdin != nil {
		// Reading a terminal or pipe cannot be interrupted portably: this
		// goroutine ends with the input or the process.
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := cio.Stdin.Read(buf)
				if n > 0 {
					if c.w.Write(FrameStdin, buf[:n]) != nil {
						return
					}
				}
				if err != nil {
					_ = c.w.Write(FrameStdinEOF, nil)
					return
				}
			}
		}()
	} else {
		_ = c.w.Write(FrameStdinEOF, nil)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.sendLoop(stop, cio)
	}()
	var exit Exit
	err := c.readUntilExit(ctx, func(f Frame) error {
		switch f.Type {
		case FrameStdout:
			if cio.Stdout != nil {
				_, _ = cio.Stdout.Write(f.Payload)
			}
		case FrameStderr:
			if cio.Stderr != nil {
				_, _ = cio.Stderr.Write(f.Payload)
			}
		case FrameEvent:
			var ev event.Event
			if err := DecodeJSON(f, FrameEvent, &ev); err != nil {
				return err
			}
			if cio.OnEvent != nil {
				cio.OnEvent(ev)
			}
		case FrameStarted:
			var st Started
			if err := DecodeJSON(f, FrameStarted, &st); err != nil {
				return err
			}
			if cio.OnStart != nil {
				cio.OnStart(st)
			}
		case FrameExit:
			return DecodeJSON(f, FrameExit, &exit)
		}
		return nil
	})
	return exit, err
}

// sendLoop sends heartbeats, signals and terminal sizes until stop.
func (c *Client) sendLoop(stop <-chan struct{}, cio ClientIO) {
	t := time.NewTicker(HeartbeatInterval)
	defer t.Stop()
	sendSize := func() {
		if cio.Winsize == nil {
			return
		}
		if rows, cols, ok := cio.Winsize(); ok {
			_ = c.w.Write(FrameWinsize, WinsizePayload(rows, cols))
		}
	}
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			_ = c.w.Write(FrameHeartbeat, nil)
		case sig := <-cio.Signals:
			s, ok := sig.(syscall.Signal)
			if !ok {
				continue
			}
			if s == syscall.SIGWINCH {
				sendSize()
				continue
			}
			_ = c.w.Write(FrameSignal, SignalPayload(int(s)))
		}
	}
}

// readUntilExit reads frames, handing each to fn, until the exit frame. Silence
// longer than HeartbeatTimeout, or a broken stream, is ErrLost.
func (c *Client) readUntilExit(ctx context.Context, fn func(Frame) error) error {
	frames := make(chan Frame)
	errc := make(chan error, 1)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		for {
			f, err := ReadFrame(c.r)
			if err != nil {
				errc <- err
				return
			}
			select {
			case frames <- f:
			case <-quit:
				return
			}
			if f.Type == FrameExit {
				return
			}
		}
	}()
	timer := time.NewTimer(HeartbeatTimeout)
	defer timer.Stop()
	for {
		select {
		case f := <-frames:
			timer.Reset(HeartbeatTimeout)
			if err := fn(f); err != nil {
				return err
			}
			if f.Type == FrameExit {
				return nil
			}
		case err := <-errc:
			return fmt.Errorf("%w: %v", ErrLost, err)
		case <-timer.C:
			return fmt.Errorf("%w: no heartbeat for %s", ErrLost, HeartbeatTimeout)
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrLost, ctx.Err())
		}
	}
}

// Probe asks the agent to measure its machine under name.
func (c *Client) Probe(ctx context.Context, name string) (*probe.Record, error) {
	if err := c.w.WriteJSON(FrameRequest, Request{Kind: KindProbe, Name: name}); err != nil {
		return nil, fmt.Errorf("%w: send the probe: %v", ErrLost, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.sendLoop(stop, ClientIO{})
	}()
	defer func() { close(stop); wg.Wait() }()
	var rec *probe.Record
	var exit Exit
	err := c.readUntilExit(ctx, func(f Frame) error {
		switch f.Type {
		case FrameRecord:
			rec = &probe.Record{}
			return DecodeJSON(f, FrameRecord, rec)
		case FrameExit:
			return DecodeJSON(f, FrameExit, &exit)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if exit.Error != "" {
		return nil, fmt.Errorf("remote probe: %s", exit.Error)
	}
	if rec == nil {
		return nil, errors.New("remote probe ended without a record")
	}
	return rec, nil
}
