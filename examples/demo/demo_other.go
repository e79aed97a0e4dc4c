//go:build !linux

package main

import (
	"context"
	"errors"
	"io"
)

type config struct{ Postern, Root, State string }

func demo(context.Context, config, io.Writer) error {
	return errors.New("the demo raises the Linux network wall: run it on Linux, as root")
}
