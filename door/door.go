package door

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

const (
	defaultDrainTimeout = 5 * time.Second
	defaultDialTimeout  = 10 * time.Second
	// peekTimeout bounds how long the door waits for the first bytes of a
	// client-speaks-first connection, and how long a started TLS ClientHello or
	// HTTP head may take to complete.
	peekTimeout = 5 * time.Second
)

// ErrNoPolicy is returned by New when Config.Policy is nil.
var ErrNoPolicy = errors.New("door config has no policy (load one with policy.Load, or use policy.Nothing to deny everything)")

// Door judges connections by a policy and connects the ones it admits.
type Door struct {
	cfg    Config
	log    *slog.Logger
	pol    atomic.Pointer[policy.Policy]
	connID atomic.Uint64
	fakes  *fakeIPs
	// insp holds what inspecting hosts needs; nil when the policy inspects
	// none.
	insp *inspector
	// repeats holds back decisions made again within a second (lookups,
	// the wall's refusals), so that a flood is recorded as a count.
	repeats *repeats

	// Seams, replaced in tests. lookup resolves a canonical name that is not
	// pinned; dial connects to exactly the address it is given; origDst reads
	// the destination a redirected connection was addressed to.
	lookup  func(ctx context.Context, name string) ([]netip.Addr, error)
	dial    func(ctx context.Context, ap netip.AddrPort) (net.Conn, error)
	origDst func(c net.Conn) (netip.AddrPort, error)

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	running bool
	// hard is done when the door stops for good (the drain ran out, or Run
	// returned): requests still in flight upstream are abandoned then.
	hard       context.Context
	hardCancel context.CancelFunc
}

// New checks cfg and returns a Door ready to Run.
func New(cfg Config) (*Door, error) {
	if cfg.Policy == nil {
		return nil, ErrNoPolicy
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = defaultDrainTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.Seal {
		cfg.Policy = cfg.Policy.Sealing()
	}
	if cfg.Emit == nil {
		cfg.Emit = func(Event) {}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pins := make(map[string][]netip.Addr, len(cfg.AddHosts))
	for name, addrs := range cfg.AddHosts {
		h, err := policy.CanonicalHost(name)
		if err != nil || h.Name == "" {
			return nil, fmt.Errorf("pinned host %q is not a host name: %v", name, err)
		}
		for _, a := range addrs {
			if !a.IsValid() {
				return nil, fmt.Errorf("pinned host %q has an invalid address", name)
			}
			pins[h.Name] = append(pins[h.Name], a.Unmap())
		}
	}
	cfg.AddHosts = pins
	d := &Door{
		cfg:     cfg,
		log:     log,
		fakes:   newFakeIPs(),
		repeats: newRepeats(),
		conns:   make(map[net.Conn]struct{}),
	}
	d.pol.Store(cfg.Policy)
	insp, err := newInspector(cfg)
	if err != nil {
		return nil, err
	}
	d.insp = insp
	if cfg.Resolver != "" {
		d.lookup = dnsLookup(cfg.Resolver, cfg.DialTimeout)
	} else {
		d.lookup = systemLookup
	}
	d.dial = func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
		// No TCP keep-alive upstream (as squid and tinyproxy): it costs four
		// setsockopts per dial and a probe per idle tunnel every 15s.
		nd := net.Dialer{KeepAlive: -1, Control: connectInPlace(ap)}
		return nd.DialContext(ctx, "tcp", ap.String())
	}
	d.origDst = func(c net.Conn) (netip.AddrPort, error) {
		tc, ok := c.(*net.TCPConn)
		if !ok {
			return netip.AddrPort{}, fmt.Errorf("transparent connection is a %T, not TCP: %w", c, ErrNoOriginalDst)
		}
		return OriginalDst(tc)
	}
	return d, nil
}

// policy returns the policy in force (the configured one, flooring the door's
// own addresses once Run knows them).
func (d *Door) policy() *policy.Policy { return d.pol.Load() }

// Run serves every non-nil listener until ctx is done. On Linux the proxy
// listener is set to accept a connection only once its client has sent bytes. Then it stops accepting,
// gives open connections cfg.DrainTimeout to finish, closes what is left, and
// returns once every goroutine it started has ended. The listeners are closed.
func (d *Door) Run(ctx context.Context, ls Listeners) error {
	d.mu.Lock()
	if d.running {
		d.mu.Unlock()
		return errors.New("door is already running")
	}
	d.running = true
	d.hard, d.hardCancel = context.WithCancel(context.WithoutCancel(ctx))
	d.mu.Unlock()

	if self := selfAddrs(ls); len(self) > 0 {
		d.pol.Store(d.cfg.Policy.WithSelf(self...))
	}

	var (
		serveWG  sync.WaitGroup // accept loops and DNS servers
		connWG   sync.WaitGroup // connection handlers
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	stop := make(chan struct{})
	var stopOnce sync.Once
	stopAll := func() { stopOnce.Do(func() { close(stop) }) }

	steady := func(l net.Listener, what string) net.Listener {
		return &steadyListener{Listener: l, what: what, log: d.log, stop: stop}
	}
	// A goroutine that accepts a connection serves it itself, after starting
	// the next acceptor: the connection goes on without waiting for a new
	// goroutine to be scheduled, which on a busy machine is a wakeup on
	// another core. serveWG counts acceptors, connWG connections; a goroutine
	// moves from one to the other once it has a connection, and the next
	// acceptor is counted before it leaves serveWG, so serveWG reaches zero
	// only when accepting has stopped.
	accept := func(l net.Listener, what string, handle func(context.Context, net.Conn)) {
		l = steady(l, what)
		var acceptor func()
		acceptor = func() {
			c, err := l.Accept()
			if err != nil {
				defer serveWG.Done()
				select {
				case <-stop:
					return
				default:
				}
				fail(fmt.Errorf("accept on %s listener %s: %w", what, l.Addr(), err))
				stopAll()
				return
			}
			d.track(c)
			connWG.Add(1)
			defer connWG.Done()
			serveWG.Add(1)
			go acceptor()
			serveWG.Done()
			defer d.untrack(c)
			handle(ctx, c)
		}
		serveWG.Add(1)
		go acceptor()
	}
	if ls.Proxy != nil {
		deferAccept(ls.Proxy)
		accept(ls.Proxy, "proxy", d.serveProxy)
	}
	if ls.Transparent != nil {
		accept(ls.Transparent, "transparent", d.serveTransparent)
	}
	dnsTCP := ls.DNSTCP
	if dnsTCP != nil {
		dnsTCP = steady(dnsTCP, "dns tcp")
	}
	dnsStop := d.serveDNS(&serveWG, ls.DNSUDP, dnsTCP, func(err error) { fail(err); stopAll() })
	if ls.WallLog != nil {
		serveWG.Add(1)
		go func() {
			defer serveWG.Done()
			d.serveWallLog(ls.WallLog)
		}()
	}
	if ls.Refused != nil {
		serveWG.Add(1)
		go func() {
			defer serveWG.Done()
			d.serveRefused(ls.Refused, stop)
		}()
	}

	select {
	case <-ctx.Done():
	case <-stop:
	}
	stopAll()
	for _, l := range []net.Listener{ls.Proxy, ls.Transparent} {
		if l != nil {
			l.Close()
		}
	}
	if ls.WallLog != nil {
		ls.WallLog.Close()
	}
	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.DrainTimeout)
	defer cancel()
	dnsStop(drainCtx)
	serveWG.Wait()
	// Lookups and refusals held back as repeats are recorded before the
	// door says it has stopped.
	for _, ev := range d.repeats.flush() {
		d.emit(ev)
	}

	drained := make(chan struct{})
	go func() { connWG.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-drainCtx.Done():
		d.hardCancel()
		d.closeAll()
		<-drained
	}
	d.hardCancel()
	d.mu.Lock()
	d.running = false
	d.mu.Unlock()

	errMu.Lock()
	defer errMu.Unlock()
	return firstErr
}

// hardCtx is the context upstream requests run in.
func (d *Door) hardCtx() context.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hard == nil {
		return context.Background()
	}
	return d.hard
}

// track records an open connection so a drain that runs out of time can close it.
func (d *Door) track(c net.Conn) {
	d.mu.Lock()
	d.conns[c] = struct{}{}
	d.mu.Unlock()
}

// untrack closes a tracked connection, unless it was handed on (see forget).
func (d *Door) untrack(c net.Conn) {
	d.mu.Lock()
	_, ok := d.conns[c]
	delete(d.conns, c)
	d.mu.Unlock()
	if ok {
		c.Close()
	}
}

// forget stops tracking c without closing it: its owner is now another (the
// Transport, for an upstream connection that carries plain HTTP).
func (d *Door) forget(c net.Conn) {
	d.mu.Lock()
	delete(d.conns, c)
	d.mu.Unlock()
}

func (d *Door) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.conns {
		c.Close()
	}
}

// selfAddrs is the door's own addresses, taken from its listeners; a listener on
// an unspecified address means every address of this host.
func selfAddrs(ls Listeners) []netip.Addr {
	var out []netip.Addr
	all := false
	add := func(a net.Addr) {
		var ip net.IP
		switch a := a.(type) {
		case *net.TCPAddr:
			ip = a.IP
		case *net.UDPAddr:
			ip = a.IP
		default:
			return
		}
		na, ok := netip.AddrFromSlice(ip)
		if !ok {
			return
		}
		na = na.Unmap()
		if na.IsUnspecified() {
			all = true
			return
		}
		out = append(out, na)
	}
	for _, l := range []net.Listener{ls.Proxy, ls.Transparent, ls.DNSTCP} {
		if l != nil {
			add(l.Addr())
		}
	}
	if ls.DNSUDP != nil {
		add(ls.DNSUDP.LocalAddr())
	}
	if all {
		if ifs, err := net.InterfaceAddrs(); err == nil {
			for _, ia := range ifs {
				if p, err := netip.ParsePrefix(ia.String()); err == nil {
					out = append(out, p.Addr().Unmap())
				}
			}
		}
	}
	return out
}

// emit records one event: to cfg.Emit, and a decision as one log line.
func (d *Door) emit(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	ev.Run = d.cfg.Run
	if ev.Mode == "" {
		ev.Mode = d.policy().Mode.String()
	}
	d.cfg.Emit(ev)
	switch ev.Event {
	case "decision":
		d.log.Info("door decision",
			"conn", ev.Conn, "kind", ev.Kind, "host", ev.Host, "port", ev.Port,
			"addr", ev.Addr, "decision", ev.Decision, "mode", ev.Mode,
			"reason", ev.Reason, "rule", ev.Rule, "would_deny", ev.WouldDeny,
			"client", ev.Client, "peer", ev.Peer, "method", ev.Method, "path", ev.Path)
	case "end":
		d.log.Debug("door end",
			"conn", ev.Conn, "kind", ev.Kind, "host", ev.Host, "port", ev.Port,
			"addr", ev.Addr, "bytes_up", ev.BytesUp, "bytes_down", ev.BytesDown,
			"duration_ms", ev.DurationMS, "reason", ev.Reason)
	}
}

// decisionEvent is the event for a judgement.
func (d *Door) decisionEvent(id uint64, kind event.Kind, client net.Addr, j Judgement) Event {
	ev := Event{
		Event:     event.Decided,
		Conn:      id,
		Kind:      kind,
		Host:      hostString(j.Host),
		Port:      j.Port,
		Decision:  decisionOf(j.Decision.Verdict),
		Reason:    j.Decision.Reason,
		Rule:      j.Decision.Rule,
		WouldDeny: j.Decision.WouldDeny,
	}
	if j.Addr.IsValid() {
		ev.Addr = j.Addr.String()
	}
	if client != nil {
		ev.Peer = client.String()
	}
	if j.as != nil {
		ev.Client = j.as.Name
		ev.Mode = j.as.Policy.Mode.String()
		ev.JudgeNS = j.took.Nanoseconds()
	}
	return ev
}

// dialJudged connects to one of the addresses a judgement checked, in order,
// never to anything else.
func (d *Door) dialJudged(ctx context.Context, j Judgement) (net.Conn, netip.Addr, error) {
	if j.Decision.Verdict != policy.Allow || len(j.Addrs) == 0 {
		return nil, netip.Addr{}, errors.New("dial of a destination that was not admitted")
	}
	// One timer bounds the dials. A context deadline would arm two (the
	// context's and the socket's write deadline), and each costs the
	// connection time on a busy machine.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(d.cfg.DialTimeout, func() {
		cancel(fmt.Errorf("no connection within %s: %w", d.cfg.DialTimeout, context.DeadlineExceeded))
	})
	defer timer.Stop()
	var errs []error
	for _, a := range j.Addrs {
		c, err := d.dial(ctx, netip.AddrPortFrom(a, j.Port))
		if err == nil {
			return c, a, nil
		}
		if cause := context.Cause(ctx); cause != nil {
			errs = append(errs, cause)
			break
		}
		errs = append(errs, err)
	}
	return nil, j.Addrs[0], fmt.Errorf("dial %s port %d: %w", j.Host, j.Port, errors.Join(errs...))
}

// closeWrite half-closes c if it can, else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	c.Close()
}
