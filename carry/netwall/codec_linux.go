package netwall

import (
	"fmt"

	"github.com/postern-dev/postern/internal/wire"
)

// The control messages are fields in a fixed order (wire.Fields), not JSON:
// both ends are one build, and the init would otherwise spend a third of a
// millisecond, on every run's way up, learning the types it decodes. A field
// added to message, initConfig, layout, gitPlace, trustFiles, wireError or
// Ending is added here too; TestCodecCarriesEveryField fails until it is.

// encodeMessage is m's payload.
func encodeMessage(m message) []byte {
	f := &wire.Fields{B: make([]byte, 0, 256)}
	f.String(m.Type)
	f.Int(int64(m.Signal))
	f.Int(int64(m.Pid))
	f.String(m.PidMaxErr)
	f.Bool(m.Status != nil)
	if m.Status != nil {
		f.Int(int64(*m.Status))
	}
	f.Bool(m.Config != nil)
	if c := m.Config; c != nil {
		f.Strings(c.Command)
		f.String(c.Dir)
		f.Strings(c.Env)
		f.Bool(c.TTY)
		encodeLayout(f, &c.Layout)
		f.Int(int64(c.PidMax))
		f.Uint(c.NProc)
		f.Bool(c.Trust != nil)
		if t := c.Trust; t != nil {
			f.Bytes(t.CA)
			f.Bytes(t.Bundle)
			f.Bytes(t.Java)
		}
		f.Strings(c.Hide)
	}
	f.Bool(m.Err != nil)
	if e := m.Err; e != nil {
		f.String(e.Step)
		f.String(e.Message)
		f.Int(int64(e.Errno))
	}
	f.Bool(m.Ending != nil)
	if e := m.Ending; e != nil {
		f.Uint(uint64(len(e.Discarded)))
		for _, d := range e.Discarded {
			f.String(d.Path)
			f.String(d.Why)
		}
		f.Int(int64(e.HomeWrites))
		f.Strings(e.HomeSample)
		f.String(e.Kept)
		f.Strings(e.Problems)
	}
	return f.B
}

func encodeLayout(f *wire.Fields, l *layout) {
	f.String(l.Home)
	f.Strings(l.Binds)
	f.Uint(uint64(len(l.Git)))
	for _, g := range l.Git {
		f.String(g.Dir)
		f.Strings(g.Bound)
		f.Bool(g.Index)
		f.Strings(g.Gitlinks)
	}
	f.Strings(l.Copies)
	f.Strings(l.ReadOnly)
	f.Strings(l.Masks)
	f.String(l.Keep)
}

// decodeMessage reads what encodeMessage wrote; anything else is an error.
func decodeMessage(b []byte) (message, error) {
	r := wire.NewFieldReader(b)
	var m message
	m.Type = r.String()
	m.Signal = int(r.Int())
	m.Pid = int(r.Int())
	m.PidMaxErr = r.String()
	if r.Bool() {
		s := int(r.Int())
		m.Status = &s
	}
	if r.Bool() {
		c := &initConfig{}
		c.Command = r.Strings()
		c.Dir = r.String()
		c.Env = r.Strings()
		c.TTY = r.Bool()
		decodeLayout(r, &c.Layout)
		c.PidMax = int(r.Int())
		c.NProc = r.Uint()
		if r.Bool() {
			c.Trust = &trustFiles{CA: r.Bytes(), Bundle: r.Bytes(), Java: r.Bytes()}
		}
		c.Hide = r.Strings()
		m.Config = c
	}
	if r.Bool() {
		m.Err = &wireError{Step: r.String(), Message: r.String(), Errno: int(r.Int())}
	}
	if r.Bool() {
		e := &Ending{}
		if n := r.Count(2); n > 0 {
			e.Discarded = make([]Discard, n)
			for i := range e.Discarded {
				e.Discarded[i] = Discard{Path: r.String(), Why: r.String()}
			}
		}
		e.HomeWrites = int(r.Int())
		e.HomeSample = r.Strings()
		e.Kept = r.String()
		e.Problems = r.Strings()
		m.Ending = e
	}
	if err := r.Done(); err != nil {
		return message{}, fmt.Errorf("decode control message: %w", err)
	}
	return m, nil
}

func decodeLayout(r *wire.FieldReader, l *layout) {
	l.Home = r.String()
	l.Binds = r.Strings()
	if n := r.Count(4); n > 0 {
		l.Git = make([]gitPlace, n)
		for i := range l.Git {
			l.Git[i] = gitPlace{Dir: r.String(), Bound: r.Strings(), Index: r.Bool(), Gitlinks: r.Strings()}
		}
	}
	l.Copies = r.Strings()
	l.ReadOnly = r.Strings()
	l.Masks = r.Strings()
	l.Keep = r.String()
}
