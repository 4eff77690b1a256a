package metricslib

import (
	"testing"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// Pre-created (per-tenant handle kept on tenant state).
func BenchmarkVMCounterPrecreated(b *testing.B) {
	s := vm.NewSet()
	c := s.NewCounter(`queen_ephemeral_pushed_messages_total{tenant="acme"}`)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(1)
		}
	})
}

func BenchmarkPromCounterPrecreated(b *testing.B) {
	r := prometheus.NewRegistry()
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "queen_ephemeral_pushed_messages_total"}, []string{"tenant"})
	r.MustRegister(v)
	c := v.WithLabelValues("acme")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(1)
		}
	})
}

// Looked up per increment (what pre-creating avoids).
func BenchmarkVMCounterLookup(b *testing.B) {
	s := vm.NewSet()
	tenant := "acme"
	b.ReportAllocs()
	for b.Loop() {
		s.GetOrCreateCounter(`queen_ephemeral_pushed_messages_total{tenant="` + tenant + `"}`).Add(1)
	}
}

func BenchmarkPromCounterLookup(b *testing.B) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "queen_ephemeral_pushed_messages_total"}, []string{"tenant"})
	tenant := "acme"
	b.ReportAllocs()
	for b.Loop() {
		v.WithLabelValues(tenant).Add(1)
	}
}

func BenchmarkVMHistogram(b *testing.B) {
	s := vm.NewSet()
	h := s.NewHistogram(`queen_ephemeral_request_duration_seconds{route="push"}`)
	b.ReportAllocs()
	for b.Loop() {
		h.Update(0.000123)
	}
}

func BenchmarkPromHistogram(b *testing.B) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "queen_ephemeral_request_duration_seconds", Buckets: prometheus.DefBuckets})
	b.ReportAllocs()
	for b.Loop() {
		h.Observe(0.000123)
	}
}

func BenchmarkVMPromHistogram(b *testing.B) {
	s := vm.NewSet()
	h := s.NewPrometheusHistogram(`queen_ephemeral_request_duration_seconds{route="push"}`)
	b.ReportAllocs()
	for b.Loop() {
		h.Update(0.000123)
	}
}

func BenchmarkVMCounterPrecreatedSerial(b *testing.B) {
	s := vm.NewSet()
	c := s.NewCounter(`queen_ephemeral_pushed_messages_total{tenant="acme"}`)
	b.ReportAllocs()
	for b.Loop() {
		c.Add(1)
	}
}

func BenchmarkPromCounterPrecreatedSerial(b *testing.B) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "queen_ephemeral_pushed_messages_total"}, []string{"tenant"})
	c := v.WithLabelValues("acme")
	b.ReportAllocs()
	for b.Loop() {
		c.Add(1)
	}
}
