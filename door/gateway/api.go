package gateway

import (
	"bufio"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/records"
)

//go:embed dashboard
var dashboardFS embed.FS

// Handler is the management API and the dashboard:
//
//	GET    /                          the dashboard (and its files); no token
//	GET    /metrics                   Prometheus text format
//	GET    /v1/policy                 the default policy
//	GET    /v1/clients                every client, with the policy in force
//	POST   /v1/clients                {"name": N} -> 201 {"name", "token"}
//	GET    /v1/clients/{name}         one client
//	DELETE /v1/clients/{name}         204
//	POST   /v1/clients/{name}/token   a new token; the old one stops working
//	GET    /v1/clients/{name}/policy  the policy in force
//	PATCH  /v1/clients/{name}/policy  a PolicyPatch, applied as sets
//	PUT    /v1/clients/{name}/policy  a whole policy
//	DELETE /v1/clients/{name}/policy  back to the default
//	GET    /v1/events                 ?client=&decision=&since=&follow=1
//
// Every route but the dashboard needs "Authorization: Bearer TOKEN" with
// the API token; errors are JSON {"error": …} with what to do instead.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(dashboardFS, "dashboard")
	files := http.FileServerFS(static)
	mux.Handle("GET /{$}", noStore(files))
	mux.Handle("GET /dashboard.js", noStore(files))
	mux.Handle("GET /dashboard.css", noStore(files))
	api := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, g.requireToken(h)) }
	api("GET /metrics", g.getMetrics)
	api("GET /v1/policy", g.getDefaultPolicy)
	api("GET /v1/clients", g.listClients)
	api("POST /v1/clients", g.postClient)
	api("GET /v1/clients/{name}", g.getClient)
	api("DELETE /v1/clients/{name}", g.deleteClient)
	api("POST /v1/clients/{name}/token", g.postToken)
	api("GET /v1/clients/{name}/policy", g.getPolicy)
	api("PATCH /v1/clients/{name}/policy", g.patchPolicy)
	api("PUT /v1/clients/{name}/policy", g.putPolicy)
	api("DELETE /v1/clients/{name}/policy", g.deletePolicy)
	api("GET /v1/events", g.getEvents)
	mux.Handle("/", g.requireToken(func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s; the API's routes start with /v1/ (see the README's gateway section)", r.Method, r.URL.Path))
	}))
	return securityHeaders(mux)
}

// securityHeaders keeps the dashboard to its own origin: no frame, no
// script or connection anywhere else.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

func noStore(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

func (g *Gateway) requireToken(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "bearer") || !g.checkAPIToken(strings.TrimSpace(tok)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="postern"`)
			apiError(w, http.StatusUnauthorized, "send the gateway's API token as Authorization: Bearer TOKEN (it is in the file given with --api-token-file)")
			return
		}
		h(w, r)
	})
}

type errorBody struct {
	Error    string               `json:"error"`
	Problems []policy.SpecProblem `json:"problems,omitempty"`
}

func apiError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// fail answers err with the status it deserves.
func fail(w http.ResponseWriter, err error) {
	var (
		se *policy.SpecError
		be *BadRequestError
	)
	switch {
	case errors.As(err, &se):
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "the policy is not valid: " + err.Error(), Problems: se.Problems})
	case errors.As(err, &be), errors.Is(err, ErrBadName):
		apiError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, records.ErrNotFound):
		apiError(w, http.StatusNotFound, err.Error()+"; list the clients with GET /v1/clients")
	case errors.Is(err, records.ErrExists):
		apiError(w, http.StatusConflict, err.Error()+"; rotate its token with POST /v1/clients/NAME/token, or remove it first")
	default:
		apiError(w, http.StatusInternalServerError, err.Error())
	}
}

func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		return nil, &BadRequestError{fmt.Sprintf("read the body: %v (at most %d bytes)", err, maxBody)}
	}
	return b, nil
}

func (g *Gateway) getMetrics(w http.ResponseWriter, r *http.Request) {
	g.mu.RLock()
	n := len(g.clients)
	g.mu.RUnlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	g.metrics.write(w, n)
}

func (g *Gateway) getDefaultPolicy(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Source string      `json:"source"`
		Policy policy.Spec `json:"policy"`
	}{g.cfg.Default.Source, g.cfg.Default.Spec()})
}

func (g *Gateway) listClients(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, g.clientInfos())
}

func (g *Gateway) postClient(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		fail(w, err)
		return
	}
	var req struct {
		Name *string `json:"name"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Name == nil {
		apiError(w, http.StatusBadRequest, `send {"name": "alice"}: a JSON object with the new client's name only`)
		return
	}
	nc, err := g.addClient(*req.Name)
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Location", "/v1/clients/"+nc.Name)
	writeJSON(w, http.StatusCreated, nc)
}

func (g *Gateway) getClient(w http.ResponseWriter, r *http.Request) {
	ci, ok := g.clientInfo(r.PathValue("name"))
	if !ok {
		fail(w, fmt.Errorf("client %q: %w", r.PathValue("name"), records.ErrNotFound))
		return
	}
	writeJSON(w, http.StatusOK, ci)
}

func (g *Gateway) deleteClient(w http.ResponseWriter, r *http.Request) {
	if err := g.removeClient(r.PathValue("name")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *Gateway) postToken(w http.ResponseWriter, r *http.Request) {
	nc, err := g.rotateToken(r.PathValue("name"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, nc)
}

func (g *Gateway) getPolicy(w http.ResponseWriter, r *http.Request) {
	ci, ok := g.clientInfo(r.PathValue("name"))
	if !ok {
		fail(w, fmt.Errorf("client %q: %w", r.PathValue("name"), records.ErrNotFound))
		return
	}
	writeJSON(w, http.StatusOK, ci)
}

func (g *Gateway) patchPolicy(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		fail(w, err)
		return
	}
	p, err := ParsePolicyPatch(body)
	if err != nil {
		fail(w, err)
		return
	}
	ci, err := g.setPolicy(r.PathValue("name"), func(cur policy.Spec) (*policy.Spec, error) {
		next := p.Apply(cur)
		return &next, nil
	})
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ci)
}

func (g *Gateway) putPolicy(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		fail(w, err)
		return
	}
	s, err := ParsePolicySpec(body)
	if err != nil {
		fail(w, err)
		return
	}
	ci, err := g.setPolicy(r.PathValue("name"), func(policy.Spec) (*policy.Spec, error) { return &s, nil })
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ci)
}

func (g *Gateway) deletePolicy(w http.ResponseWriter, r *http.Request) {
	ci, err := g.setPolicy(r.PathValue("name"), func(policy.Spec) (*policy.Spec, error) { return nil, nil })
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ci)
}

// ParseFilter reads the query of GET /v1/events: client, decision (allow or
// deny), since (an event's seq, or an RFC 3339 time).
func ParseFilter(q map[string][]string) (Filter, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	var f Filter
	f.Client = get("client")
	if f.Client != "" {
		if err := CheckName(f.Client); err != nil {
			return f, &BadRequestError{err.Error()}
		}
	}
	switch d := get("decision"); d {
	case "", "allow", "deny":
		f.Decision = event.Decision(d)
	default:
		return f, &BadRequestError{fmt.Sprintf("decision=%q: write decision=allow or decision=deny", d)}
	}
	if s := get("since"); s != "" {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			f.AfterSeq = n
		} else if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			f.Since = t
		} else {
			return f, &BadRequestError{fmt.Sprintf("since=%q: write an event's seq (since=42: the events after it) or an RFC 3339 time (since=2025-01-02T15:04:05Z)", s)}
		}
	}
	return f, nil
}

func (g *Gateway) getEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := ParseFilter(q)
	if err != nil {
		fail(w, err)
		return
	}
	follow := q.Get("follow")
	if follow != "" && follow != "1" && follow != "0" {
		apiError(w, http.StatusBadRequest, fmt.Sprintf("follow=%q: write follow=1 to stream events as they happen", follow))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	bw := bufio.NewWriterSize(w, 32<<10)
	enc := json.NewEncoder(bw)
	if follow != "1" {
		for _, rec := range g.events.query(f) {
			enc.Encode(rec)
		}
		bw.Flush()
		return
	}
	past, fl, stop := g.events.follow(f, followBuffer)
	defer stop()
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	for _, rec := range past {
		enc.Encode(rec)
	}
	rc := http.NewResponseController(w)
	flush := func() bool {
		if bw.Flush() != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !flush() {
		return
	}
	// A line now and then lets a client (and the gateway) notice a
	// connection that is gone while nothing happens.
	beat := time.NewTicker(15 * time.Second)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-beat.C:
			bw.WriteString("\n")
		case rec := <-fl.ch:
			enc.Encode(rec)
			for more := true; more; {
				select {
				case rec := <-fl.ch:
					enc.Encode(rec)
				default:
					more = false
				}
			}
			if n := g.events.takeLost(fl); n > 0 {
				g.metrics.followerLost(n)
				fmt.Fprintf(bw, "{\"event\":\"lost\",\"lost\":%d}\n", n)
			}
		}
		if !flush() {
			return
		}
	}
}

func sortInfos(out []ClientInfo) {
	slices.SortFunc(out, func(a, b ClientInfo) int { return strings.Compare(a.Name, b.Name) })
}
