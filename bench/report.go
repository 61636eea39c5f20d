package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Report is the --json document: the mode, the machine and every row. A
// harness that runs NCCL writes the same shape (Label "nccl") so that
// --peer can draw it beside goccl's.
type Report struct {
	Tool        string       `json:"tool"`
	Label       string       `json:"label"`
	Collective  string       `json:"collective"`
	Backend     string       `json:"backend"`
	NRanks      int          `json:"nranks"`
	Host        string       `json:"host"`
	Devices     []DeviceLine `json:"devices"`
	Mode        Mode         `json:"mode"`
	Rows        []Row        `json:"rows"`
	OutOfBounds int          `json:"out_of_bounds"`
	AvgBusBW    float64      `json:"avg_busbw_gbps"`
	Date        string       `json:"date"`
}

// Mode records the flags that change what is measured.
type Mode struct {
	MinBytes    int64 `json:"min_bytes"`
	MaxBytes    int64 `json:"max_bytes"`
	StepFactor  int64 `json:"step_factor"`
	StepBytes   int64 `json:"step_bytes"`
	Iters       int   `json:"iters"`
	Warmup      int   `json:"warmup_iters"`
	Check       int   `json:"check"`
	Graph       int   `json:"graph"`
	Register    int   `json:"register"`
	Blocking    bool  `json:"blocking"`
	Average     int   `json:"average"`
	GPUsPerProc int   `json:"gpus_per_process"`
}

// NewReport assembles the document from a configuration and a summary.
func NewReport(cfg *Config, sum Summary) Report {
	host, _ := os.Hostname()
	backend := "host"
	if len(sum.Devices) > 0 && sum.Devices[0].Ordinal >= 0 {
		backend = "gpu"
	}
	return Report{
		Tool: "goccl bench", Label: cfg.Label, Collective: cfg.TestName(), Backend: backend,
		NRanks: len(sum.Devices), Host: host, Devices: sum.Devices,
		Mode: Mode{MinBytes: cfg.MinBytes, MaxBytes: cfg.MaxBytes, StepFactor: cfg.StepFactor, StepBytes: cfg.StepBytes,
			Iters: cfg.Iters, Warmup: cfg.Warmup, Check: cfg.Check, Graph: cfg.Graph, Register: cfg.Register,
			Blocking: cfg.Blocking, Average: int(cfg.Average), GPUsPerProc: cfg.GPUs},
		Rows: sum.Rows, OutOfBounds: sum.OutOfBounds, AvgBusBW: sum.AvgBusBW,
		Date: time.Now().UTC().Format(time.RFC3339),
	}
}

// WriteJSON writes r to path.
func (r Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return nil
}

// ReadReport loads a --json document (ours, or a peer's of the same shape).
func ReadReport(path string) (Report, error) {
	var r Report
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("bench: read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("bench: %s is not a bench report: %w", path, err)
	}
	if len(r.Rows) == 0 {
		return r, fmt.Errorf("bench: %s holds no rows", path)
	}
	return r, nil
}
