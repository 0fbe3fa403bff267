package daemon

import (
	"encoding/json"
	"net/http"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves /metrics, /healthz, /readyz, the quarantine API and
// the in-sandbox incident API (as guarded as the quarantine API).
// It has no authentication. The quarantine API answers loopback clients
// only, wherever the endpoint is bound: a listen.admin opened to the
// network for Prometheus (as in the Kubernetes manifests) must not let
// anything that reaches the port lift or impose a quarantine. Nor does it
// trust a loopback client that is egressd's own proxy speaking for a
// sandbox (the proxy refuses to dial the admin port at all: proxy-loop;
// this is the second lock).
func (d *Daemon) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := d.Ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		w.Write([]byte(why + "\n"))
	})
	mux.HandleFunc("POST /quarantine/{identity}", d.quarantineAPI(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("identity")
		n := d.px.Quarantine(id)
		writeJSON(w, map[string]any{"identity": id, "quarantined": true, "tunnels_closed": n})
	}))
	mux.HandleFunc("DELETE /quarantine/{identity}", d.quarantineAPI(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("identity")
		was := d.px.Lift(id)
		if !was {
			w.WriteHeader(http.StatusNotFound)
		}
		writeJSON(w, map[string]any{"identity": id, "quarantined": false, "was_quarantined": was})
	}))
	mux.HandleFunc("GET /quarantine", d.quarantineAPI(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"quarantined": d.px.Quarantined()})
	}))
	// In-sandbox leak incidents: open until an operator acknowledges one
	// (a pass the sandbox reports does not close it).
	mux.HandleFunc("GET /probes/incidents", d.quarantineAPI(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"incidents": d.probes.Incidents()})
	}))
	mux.HandleFunc("POST /probes/{identity}/ack", d.quarantineAPI(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("identity")
		was := d.probes.Acknowledge(id, r.RemoteAddr)
		if !was {
			w.WriteHeader(http.StatusNotFound)
		}
		writeJSON(w, map[string]any{"identity": id, "acknowledged": was})
	}))
	return mux
}

// quarantineAPI guards a quarantine handler: loopback clients only, and
// none that came through the proxy.
func (d *Daemon) quarantineAPI(h http.HandlerFunc) http.HandlerFunc {
	return loopbackOnly(d.notViaProxy(h))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// loopbackOnly refuses, with 403, a request whose client is not on this
// host's loopback.
func loopbackOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil || !ap.Addr().Unmap().IsLoopback() {
			http.Error(w, "egressd: the quarantine API answers loopback clients only", http.StatusForbidden)
			return
		}
		h(w, r)
	}
}

// notViaProxy refuses, with 403, a request whose client is the local end
// of one of egressd's own upstream connections.
func (d *Daemon) notViaProxy(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil || d.px.ViaProxy(ap) {
			http.Error(w, "egressd: the quarantine API does not answer requests that came through egressd's proxy", http.StatusForbidden)
			return
		}
		h(w, r)
	}
}
