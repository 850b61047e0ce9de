package api

import (
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"meshd/agent"
	"meshd/agent/node"
	"meshd/internal/buildinfo"
)

// Metrics is meshd's Prometheus instrumentation. Counters that follow
// serves are updated as each serve ends (it implements node.Metrics);
// what lives elsewhere — meters, engines, grant budgets — is read at
// scrape time from the node, so a scrape always sees the present.
type Metrics struct {
	reg        *prometheus.Registry
	serves     *prometheus.CounterVec
	refusals   *prometheus.CounterVec
	tokens     *prometheus.CounterVec
	joules     *prometheus.CounterVec
	perToken   *prometheus.HistogramVec
	coverage   *prometheus.HistogramVec
	degraded   *prometheus.CounterVec
	fsync      prometheus.Histogram
	nodeSource func() *node.Node
}

var _ node.Metrics = (*Metrics)(nil)

// NewMetrics makes the metrics, reading scrape-time figures from the node
// source returns (nil before the node is open).
func NewMetrics(source func() *node.Node) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		serves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshd_serves_total",
			Help: "Serves sealed, by backend and energy provenance."}, []string{"backend", "provenance"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshd_refusals_total",
			Help: "Serves that sealed nothing, by backend (empty before routing) and reason."}, []string{"backend", "reason"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshd_tokens_total",
			Help: "Tokens of sealed serves, by backend and direction (in, out, accepted)."}, []string{"backend", "direction"}),
		joules: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshd_charged_joules_total",
			Help: "Energy charged on sealed receipts, by backend and provenance."}, []string{"backend", "provenance"}),
		perToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meshd_energy_per_accepted_token_joules",
			Help:    "Charged energy per accepted token of each sealed serve, by backend and provenance.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 24)}, []string{"backend", "provenance"}),
		coverage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meshd_window_coverage_ratio",
			Help:    "Fraction of each metered serve the meter's readings covered, by backend.",
			Buckets: []float64{0.5, 0.9, 0.99, 0.999, 0.9999, 1}}, []string{"backend"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshd_degraded_serves_total",
			Help: "Serves of a metered backend sealed as Estimator because the meter measured nothing."}, []string{"backend"}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshd_log_fsync_seconds",
			Help: "Latency of receipt log fsyncs.", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)}),
		nodeSource: source,
	}
	m.reg.MustRegister(buildInfoGauge(buildinfo.Read()))
	m.reg.MustRegister(m.serves, m.refusals, m.tokens, m.joules, m.perToken, m.coverage, m.degraded, m.fsync,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), &scrape{m})
	return m
}

// buildInfoGauge is meshd_build_info: always 1, the build in its labels,
// so a dashboard can join any series with the version that produced it.
func buildInfoGauge(in buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshd_build_info",
		Help: "The running build: module version, VCS revision (12 hex, +dirty for a modified tree, unknown without VCS), Go version and architecture; always 1.",
		ConstLabels: prometheus.Labels{"version": in.Version, "revision": in.Rev(), "go_version": in.GoVersion,
			"arch": strings.TrimPrefix(in.Platform(), in.OS+"/")}})
	g.Set(1)
	return g
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Served implements node.Metrics.
func (m *Metrics) Served(ev agent.Event) {
	if ev.Sealed == nil {
		m.refusals.WithLabelValues(ev.Backend, ev.Reason).Inc()
		return
	}
	r := ev.Sealed.Receipt
	p := r.EnergyProvenance
	m.serves.WithLabelValues(ev.Backend, p).Inc()
	m.tokens.WithLabelValues(ev.Backend, "in").Add(float64(ev.TokensIn))
	m.tokens.WithLabelValues(ev.Backend, "out").Add(float64(ev.TokensOut))
	m.tokens.WithLabelValues(ev.Backend, "accepted").Add(float64(ev.TokensAccepted))
	if e, err := r.Energy(); err == nil {
		m.joules.WithLabelValues(ev.Backend, p).Add(float64(e.UJ()) / 1e6)
	}
	if r.UJPerAcceptedToken != nil {
		m.perToken.WithLabelValues(ev.Backend, p).Observe(float64(*r.UJPerAcceptedToken) / 1e6)
	}
	if r.CoveredPPM != nil {
		m.coverage.WithLabelValues(ev.Backend).Observe(float64(*r.CoveredPPM) / 1e6)
	}
	if ev.Degraded {
		m.degraded.WithLabelValues(ev.Backend).Inc()
	}
}

// Synced implements node.Metrics.
func (m *Metrics) Synced(d time.Duration) { m.fsync.Observe(d.Seconds()) }

// scrape collects what the node knows at scrape time.
type scrape struct{ m *Metrics }

var (
	descPower    = prometheus.NewDesc("meshd_meter_power_watts", "Newest reading of each meter (a display figure: it measures no window).", []string{"meter", "driver"}, nil)
	descHealthy  = prometheus.NewDesc("meshd_meter_healthy", "1 while the meter delivers readings, else 0.", []string{"meter"}, nil)
	descReads    = prometheus.NewDesc("meshd_meter_readings_total", "Readings recorded by each meter's sampler.", []string{"meter"}, nil)
	descReadErrs = prometheus.NewDesc("meshd_meter_read_errors_total", "Readings that carried no measurement (bus errors, stalls, overflows, bad timestamps).", []string{"meter"}, nil)
	descStalls   = prometheus.NewDesc("meshd_meter_stalls_total", "Times a sensor produced no new reading within three periods.", []string{"meter"}, nil)
	descRestarts = prometheus.NewDesc("meshd_engine_restarts_total", "Engine restarts after crashes, by backend.", []string{"backend"}, nil)
	descBudget   = prometheus.NewDesc("meshd_grant_budget_remaining_joules", "Budget left on each grant the ledger holds an account for.", []string{"grant"}, nil)
	descReceipts = prometheus.NewDesc("meshd_receipts", "Receipts in the chain.", nil, nil)

	// The receipt log's disk budget (PROFILE.md §8).
	descLogBytes    = prometheus.NewDesc("meshd_log_bytes", "Bytes of the receipt log directory (segments, checkpoints, manifest).", nil, nil)
	descLogLimit    = prometheus.NewDesc("meshd_log_limit_bytes", "The receipt log's disk budget (0: none).", nil, nil)
	descLogGrowth   = prometheus.NewDesc("meshd_log_growth_bytes_per_second", "Bytes the receipt log grows by per second over the last hour (archived bytes count as written).", nil, nil)
	descLogDays     = prometheus.NewDesc("meshd_log_days_left", "Days, at the growth rate, until the live log reaches its budget (without one: fills its filesystem); absent while the rate is unknown.", nil, nil)
	descLogArchived = prometheus.NewDesc("meshd_log_archived_receipts", "Receipts whose segments left the live log (archived or removed once acknowledged).", []string{"how"}, nil)
	descStorage     = prometheus.NewDesc("meshd_storage_ok", "1 while the receipt log and the grant ledger take writes, 0 while the storage refuses them (serves refused with storage_unavailable until it heals).", nil, nil)
)

func (s *scrape) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPower, descHealthy, descReads, descReadErrs, descStalls, descRestarts, descBudget, descReceipts, descLogBytes, descLogLimit, descLogGrowth, descLogDays, descLogArchived, descStorage} {
		ch <- d
	}
}

func (s *scrape) Collect(ch chan<- prometheus.Metric) {
	n := s.m.nodeSource()
	if n == nil {
		return
	}
	for _, mt := range n.Meters() {
		name := mt.Config.Name
		if uw, _, ok := mt.Meter.Latest(); ok {
			ch <- prometheus.MustNewConstMetric(descPower, prometheus.GaugeValue, float64(uw)/1e6, name, mt.Config.Driver)
		}
		h := 1.0
		if mt.Meter.Health() != nil {
			h = 0
		}
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, h, name)
		st := mt.Meter.Stats()
		ch <- prometheus.MustNewConstMetric(descReads, prometheus.CounterValue, float64(st.Entries), name)
		ch <- prometheus.MustNewConstMetric(descReadErrs, prometheus.CounterValue, float64(st.Invalid), name)
		ch <- prometheus.MustNewConstMetric(descStalls, prometheus.CounterValue, float64(st.Stalls), name)
	}
	for _, b := range n.Backends() {
		ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(b.Restarts()), b.Config.Name)
	}
	if n.Stores != nil {
		for g, bal := range n.Stores.Ledger.Balances() {
			ch <- prometheus.MustNewConstMetric(descBudget, prometheus.GaugeValue, float64(bal.RemainingUJ)/1e6, g.String())
		}
		ch <- prometheus.MustNewConstMetric(descReceipts, prometheus.GaugeValue, float64(n.Stores.Log.Durable()))
		ok := 1.0
		if n.Storage() != nil {
			ok = 0
		}
		ch <- prometheus.MustNewConstMetric(descStorage, prometheus.GaugeValue, ok)
	}
	if b := n.Budget(); b != nil {
		st := b.Stats()
		ch <- prometheus.MustNewConstMetric(descLogBytes, prometheus.GaugeValue, float64(st.Bytes))
		ch <- prometheus.MustNewConstMetric(descLogLimit, prometheus.GaugeValue, float64(st.Limit))
		ch <- prometheus.MustNewConstMetric(descLogGrowth, prometheus.GaugeValue, st.Growth)
		if st.DaysLeft >= 0 {
			ch <- prometheus.MustNewConstMetric(descLogDays, prometheus.GaugeValue, st.DaysLeft)
		}
		var archived, removed uint64
		for _, a := range st.Archived {
			if a.Path != "" {
				archived += a.Next - a.First
			} else {
				removed += a.Next - a.First
			}
		}
		ch <- prometheus.MustNewConstMetric(descLogArchived, prometheus.GaugeValue, float64(archived), "archived")
		ch <- prometheus.MustNewConstMetric(descLogArchived, prometheus.GaugeValue, float64(removed), "removed")
	}
}
