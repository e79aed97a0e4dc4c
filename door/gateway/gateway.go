package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/records"
)

// Defaults of Config.
const (
	DefaultEventsPerClient = 1000
	defaultReloadEvery     = 250 * time.Millisecond
	followBuffer           = 4096
)

// Config is what a Gateway needs. Store, Default and APIToken are required.
type Config struct {
	// Store holds the clients and their policies.
	Store *records.Store
	// Default judges every client that has no policy of its own.
	Default *policy.Policy
	// APIToken is the bearer token every API route but the dashboard needs.
	APIToken string
	// Resolver and AddHosts are the door's (see door.Config).
	Resolver string
	AddHosts map[string][]netip.Addr
	// EventsPerClient bounds each client's ring of events; zero means
	// DefaultEventsPerClient.
	EventsPerClient int
	// ReloadEvery is how often the records are looked at for clients
	// changed by another process; zero means 250ms.
	ReloadEvery time.Duration
	// Emit, if set, also receives every event. It must not block for long.
	Emit   func(event.Event)
	Logger *slog.Logger
	// DrainTimeout bounds how long open connections may go on once Run's
	// context is done; zero means the door's default.
	DrainTimeout time.Duration
}

// Listeners are the gateway's sockets.
type Listeners struct {
	Proxy net.Listener // the explicit proxy clients use
	API   net.Listener // the management API and the dashboard
}

// clientState is one client as the gateway judges it.
type clientState struct {
	rec    records.GatewayClient
	hash   [32]byte
	client *door.Client // its name and the policy in force (its own, floored, or the default)
	own    bool
}

// Gateway is one door many clients use, each judged by its own policy.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	events  *eventStore
	metrics *metrics

	// wmu orders every change of the clients (the API's, and reloads of
	// what another process changed): the records first, then memory.
	wmu sync.Mutex

	mu      sync.RWMutex
	clients map[string]*clientState
	version uint64
	self    []netip.Addr
	def     *door.Client // the default policy, floored, with no name
	started bool
}

// New checks cfg and returns a Gateway ready to Run.
func New(cfg Config) (*Gateway, error) {
	if cfg.Store == nil {
		return nil, errors.New("gateway config has no records store (open one with records.Open)")
	}
	if cfg.Default == nil {
		return nil, errors.New("gateway config has no default policy (load one with policy.Load, or use policy.Nothing to deny everything to clients without their own)")
	}
	if len(cfg.APIToken) < 16 {
		return nil, errors.New("gateway API token is shorter than 16 characters; make one with NewToken")
	}
	if cfg.EventsPerClient <= 0 {
		cfg.EventsPerClient = DefaultEventsPerClient
	}
	if cfg.ReloadEvery <= 0 {
		cfg.ReloadEvery = defaultReloadEvery
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{
		cfg: cfg, log: log,
		events:  newEventStore(cfg.EventsPerClient),
		metrics: newMetrics(),
		clients: map[string]*clientState{},
		def:     &door.Client{Policy: cfg.Default},
	}
	return g, nil
}

// Run serves the proxy and the API until ctx is done, then lets open
// connections drain and returns once everything it started has ended. The
// listeners are closed.
func (g *Gateway) Run(ctx context.Context, ls Listeners) error {
	if ls.Proxy == nil || ls.API == nil {
		return errors.New("gateway needs a proxy and an API listener")
	}
	g.mu.Lock()
	if g.started {
		g.mu.Unlock()
		return errors.New("gateway is already running")
	}
	g.started = true
	g.self = append(door.ListenerAddrs(door.Listeners{Proxy: ls.Proxy, DNSTCP: ls.API}), g.self...)
	g.def = &door.Client{Policy: g.cfg.Default.WithSelf(g.self...)}
	g.mu.Unlock()
	g.wmu.Lock()
	err := g.reloadLocked()
	g.wmu.Unlock()
	if err != nil {
		ls.Proxy.Close()
		ls.API.Close()
		return fmt.Errorf("load the gateway's clients: %w", err)
	}

	d, err := door.New(door.Config{
		Policy:       g.def.Policy,
		Resolver:     g.cfg.Resolver,
		AddHosts:     g.cfg.AddHosts,
		Emit:         g.emit,
		Logger:       g.log,
		DrainTimeout: g.cfg.DrainTimeout,
		Authenticate: g.authenticate,
	})
	if err != nil {
		ls.Proxy.Close()
		ls.API.Close()
		return err
	}

	apiCtx, stopAPI := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAPI()
	srv := &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return apiCtx },
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Go(func() {
		if err := d.Run(ctx, door.Listeners{Proxy: ls.Proxy}); err != nil {
			errc <- fmt.Errorf("gateway proxy: %w", err)
		}
	})
	wg.Go(func() {
		if err := srv.Serve(ls.API); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("gateway api on %s: %w", ls.API.Addr(), err)
		}
	})
	wg.Go(func() { g.watch(ctx) })

	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
	}
	stopAPI() // ends the followers of /v1/events
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	srv.Shutdown(sctx)
	cancel()
	srv.Close()
	wg.Wait()
	close(errc)
	for err := range errc {
		first = errors.Join(first, err)
	}
	return first
}

// watch reloads the clients whenever another process changed them in the
// records, until ctx is done. It looks at the file's size and time first,
// and reads the clients' version only when they changed.
func (g *Gateway) watch(ctx context.Context) {
	t := time.NewTicker(g.cfg.ReloadEvery)
	defer t.Stop()
	var last os.FileInfo
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := os.Stat(g.cfg.Store.Path())
		if err != nil {
			g.log.Warn("gateway cannot see its records file", "path", g.cfg.Store.Path(), "err", err)
			continue
		}
		if last != nil && st.ModTime().Equal(last.ModTime()) && st.Size() == last.Size() {
			continue
		}
		last = st
		ver, err := g.cfg.Store.GatewayClientsVersion()
		if err != nil {
			g.log.Warn("gateway cannot read its clients' version", "err", err)
			continue
		}
		g.mu.RLock()
		same := ver == g.version
		g.mu.RUnlock()
		if same {
			continue
		}
		g.wmu.Lock()
		err = g.reloadLocked()
		g.wmu.Unlock()
		if err != nil {
			g.log.Warn("gateway cannot reload its clients; it judges by the ones it has", "err", err)
		}
	}
}

// reloadLocked replaces the clients in memory with those in the records.
// g.wmu is held.
func (g *Gateway) reloadLocked() error {
	recs, ver, err := g.cfg.Store.GatewayClients()
	if err != nil {
		return err
	}
	next := make(map[string]*clientState, len(recs))
	for _, r := range recs {
		next[r.Name] = g.state(r)
	}
	g.mu.Lock()
	old := g.clients
	g.clients, g.version = next, ver
	g.mu.Unlock()
	for name := range old {
		if _, ok := next[name]; !ok {
			g.events.forget(name)
			g.metrics.forget(name)
		}
	}
	return nil
}

// state compiles a client's record into what the door judges it by. A
// stored policy that no longer compiles denies everything: a client never
// gets more than its record says.
func (g *Gateway) state(r records.GatewayClient) *clientState {
	st := &clientState{rec: r}
	if h, err := hex.DecodeString(r.TokenHash); err == nil && len(h) == 32 {
		copy(st.hash[:], h)
	} // else no token matches: the zero hash is no token's SHA-256
	g.mu.RLock()
	self, def := g.self, g.def
	g.mu.RUnlock()
	pol := def.Policy
	if r.Policy != nil {
		p, err := policy.FromSpec(policySource(r.Name), *r.Policy)
		if err != nil {
			g.log.Warn("client policy in the records does not compile; the client may reach nothing until it is replaced", "client", r.Name, "err", err)
			p = policy.Nothing()
		}
		pol = p.WithSelf(self...)
		st.own = true
	}
	st.client = &door.Client{Name: r.Name, Policy: pol}
	return st
}

func policySource(client string) string { return "gateway policy of client " + client }

// authenticate is the door's Authenticate: the client the request's proxy
// credentials name, with the policy in force for it now.
func (g *Gateway) authenticate(r *http.Request) (*door.Client, error) {
	name, token, err := ParseProxyAuthorization(r.Header.Get("Proxy-Authorization"))
	if err != nil {
		var pe *ProxyAuthError
		problem := authMalformed
		if errors.As(err, &pe) {
			problem = pe.Problem
		}
		g.metrics.authFailed(problem)
		return nil, &door.AuthError{Client: name, Reason: err.Error()}
	}
	g.mu.RLock()
	st := g.clients[name]
	g.mu.RUnlock()
	if st == nil {
		g.metrics.authFailed(authUnknown)
		return nil, &door.AuthError{Client: name, Reason: fmt.Sprintf("no client %q; add it with 'postern gateway clients add %s'", name, name)}
	}
	if !tokenMatches(token, st.hash) {
		g.metrics.authFailed(authWrong)
		return nil, &door.AuthError{Client: name, Reason: fmt.Sprintf("wrong token for client %q (rotated? get a new one with POST /v1/clients/%s/token)", name, name)}
	}
	return st.client, nil
}

// emit takes every event of the door: into the client's ring, the metrics,
// the followers, and cfg.Emit.
func (g *Gateway) emit(ev event.Event) {
	g.mu.RLock()
	_, known := g.clients[ev.Client]
	g.mu.RUnlock()
	label := ""
	if known {
		label = ev.Client
	}
	if ev.Event == event.Decided && strings.Contains(ev.Reason, "this connection belongs to client") {
		g.metrics.authFailed(authOtherClient)
	}
	g.metrics.observe(ev, label)
	g.events.add(ev, known)
	if g.cfg.Emit != nil {
		g.cfg.Emit(ev)
	}
}

// checkAPIToken compares a bearer token with the API's in constant time.
func (g *Gateway) checkAPIToken(tok string) bool {
	return subtle.ConstantTimeCompare([]byte(tok), []byte(g.cfg.APIToken)) == 1
}
