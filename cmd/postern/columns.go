package main

import (
	"bytes"
	"io"
	"strings"
	"unicode/utf8"
)

// eventWidths are the starting widths of the event columns when following:
// time, event, kind, decision, host, port, address, bytes; the reason takes
// the rest of the line.
var eventWidths = []int{12, 8, 11, 16, 40, 5, 24, 13}

// columns writes tab-separated lines as columns of fixed widths, two spaces
// apart: a cell wider than its column is cut, ending in "…" (--json has it
// whole); the last column is neither padded nor cut. Unlike a tabwriter it
// prints each line as it is flushed, so lines that come one batch at a time
// stay under the same header.
type columns struct {
	w      io.Writer
	widths []int
	buf    bytes.Buffer
}

func newColumns(w io.Writer, widths []int) *columns {
	return &columns{w: w, widths: append([]int(nil), widths...)}
}

func (c *columns) Write(p []byte) (int, error) { return c.buf.Write(p) }

func (c *columns) Flush() error {
	var out strings.Builder
	for {
		line, err := c.buf.ReadString('\n')
		if err != nil {
			c.buf.WriteString(line) // an unfinished line waits for its end
			break
		}
		cells := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		for i, cell := range cells {
			if i == len(cells)-1 {
				out.WriteString(cell)
				break
			}
			if i >= len(c.widths) {
				c.widths = append(c.widths, utf8.RuneCountInString(cell))
			}
			cell = cut(cell, c.widths[i])
			n := utf8.RuneCountInString(cell)
			out.WriteString(cell)
			out.WriteString(strings.Repeat(" ", c.widths[i]-n+2))
		}
		out.WriteString("\n")
	}
	_, err := io.WriteString(c.w, out.String())
	return err
}
