package comm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/goccl/goccl/collectives"
)

// Launcher names EnvInfo.Source may hold.
const (
	SourceGoccl    = "goccl"    // GOCCL_COMM_ID (goccl run)
	SourceTorchrun = "torchrun" // MASTER_ADDR/MASTER_PORT
	SourceOpenMPI  = "openmpi"  // OMPI_COMM_WORLD_*
	SourcePMI      = "pmi"      // PMI_RANK/PMI_SIZE
	SourceSlurm    = "slurm"    // SLURM_PROCID/SLURM_NTASKS
)

// EnvInfo is what a launcher's environment says about this process.
type EnvInfo struct {
	Rank, Size           int
	LocalRank, LocalSize int
	// Source names the launcher whose variables gave the rank and size.
	Source string
	// Addr is rank 0's bootstrap address when the launcher gives one
	// (GOCCL_COMM_ID, MASTER_ADDR:MASTER_PORT); AddrVar names where it
	// came from. When it is invalid, rank 0 publishes its address in a
	// file named by JobKey (see rendezvousFile).
	Addr    netip.AddrPort
	AddrVar string
	// JobKey identifies the job among those of this user on this node
	// when there is no address.
	JobKey string
	// Token is GOCCL_JOB_TOKEN (empty when unset).
	Token string
}

type rankVars struct {
	source                         string
	rank, size, localRank, localSz string
}

// Rank variables in the order DESIGN §6 reads them.
var rankSources = []rankVars{
	{SourceTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
	{SourceOpenMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
	{SourcePMI, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
	{SourceSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
}

// Variables that identify an mpirun/srun job, in order of preference.
var jobKeyVars = []string{"GOCCL_JOB_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_hnp_uri", "PMI_KVSNAME", "SLURM_JOB_ID"}

// ParseEnv reads a launcher's environment. ppid is the parent process id,
// the job key of last resort: every rank mpirun or srun starts on a node
// has the same parent. It is a pure function of its arguments.
func ParseEnv(env map[string]string, ppid int) (EnvInfo, error) {
	var info EnvInfo
	info.Token = env["GOCCL_JOB_TOKEN"]
	if info.Token != "" {
		if len(info.Token) < 16 || !isHex(info.Token) {
			return info, envErr("GOCCL_JOB_TOKEN", info.Token, "want at least 16 hex digits")
		}
	}

	// Rank and size: the first launcher whose rank variable is set.
	var src *rankVars
	for i := range rankSources {
		if _, ok := env[rankSources[i].rank]; ok {
			src = &rankSources[i]
			break
		}
	}
	if src == nil {
		return info, fmt.Errorf("%w: no launcher environment: set GOCCL_COMM_ID or MASTER_ADDR/MASTER_PORT with RANK and WORLD_SIZE, or start under goccl run, torchrun, mpirun or srun", collectives.ErrInvalidArgument)
	}
	info.Source = src.source
	var err error
	if info.Size, err = envInt(env, src.size, 1, maxRanks, true); err != nil {
		return info, err
	}
	if info.Rank, err = envInt(env, src.rank, 0, info.Size-1, true); err != nil {
		return info, err
	}
	info.LocalRank, info.LocalSize = info.Rank, info.Size
	// SLURM_NTASKS_PER_NODE may read "2(x3)"; Slurm's local size stays Size.
	if _, ok := env[src.localSz]; ok && src.source != SourceSlurm {
		if info.LocalSize, err = envInt(env, src.localSz, 1, info.Size, true); err != nil {
			return info, err
		}
	}
	if _, ok := env[src.localRank]; ok {
		if info.LocalRank, err = envInt(env, src.localRank, 0, info.LocalSize-1, true); err != nil {
			return info, err
		}
	}

	// Address: GOCCL_COMM_ID, then MASTER_ADDR:MASTER_PORT.
	if v, ok := env["GOCCL_COMM_ID"]; ok {
		if info.Addr, err = parseHostPort(v); err != nil {
			return info, envErr("GOCCL_COMM_ID", v, err.Error())
		}
		info.AddrVar = "GOCCL_COMM_ID"
		return info, nil
	}
	ma, hasAddr := env["MASTER_ADDR"]
	mp, hasPort := env["MASTER_PORT"]
	// Under torchrun the agent's own store listens on MASTER_PORT, so rank
	// 0 cannot bind it: on one node, rendezvous through a file named by the
	// elastic run instead (set GOCCL_COMM_ID for jobs across nodes).
	if run := env["TORCHELASTIC_RUN_ID"]; run != "" && info.LocalSize == info.Size {
		info.JobKey = "torchelastic=" + run + "." + env["TORCHELASTIC_RESTART_COUNT"] + "." + mp
		return info, nil
	}
	switch {
	case hasAddr && !hasPort:
		return info, fmt.Errorf("%w: MASTER_ADDR=%q is set but MASTER_PORT is not", collectives.ErrInvalidArgument, ma)
	case hasPort && !hasAddr:
		return info, fmt.Errorf("%w: MASTER_PORT=%q is set but MASTER_ADDR is not", collectives.ErrInvalidArgument, mp)
	case hasAddr:
		port, err := strconv.ParseUint(mp, 10, 16)
		if err != nil || port == 0 {
			return info, envErr("MASTER_PORT", mp, "want a port number in [1,65535]")
		}
		a, err := resolveHost(ma)
		if err != nil {
			return info, envErr("MASTER_ADDR", ma, err.Error())
		}
		info.Addr = netip.AddrPortFrom(a, uint16(port))
		info.AddrVar = "MASTER_ADDR"
		return info, nil
	}

	// No address: rank 0 publishes one in a file named by the job.
	for _, k := range jobKeyVars {
		if v := env[k]; v != "" {
			info.JobKey = k + "=" + v
			if k == "SLURM_JOB_ID" {
				info.JobKey += "." + env["SLURM_STEP_ID"]
			}
			return info, nil
		}
	}
	if info.Token != "" {
		info.JobKey = "token=" + info.Token
		return info, nil
	}
	if ppid > 1 {
		info.JobKey = "ppid=" + strconv.Itoa(ppid)
		return info, nil
	}
	return info, fmt.Errorf("%w: %s gives no bootstrap address and no job id: set GOCCL_COMM_ID=host:port", collectives.ErrInvalidArgument, src.source)
}

func envErr(name, val, why string) error {
	return fmt.Errorf("%w: %s=%q: %s", collectives.ErrInvalidArgument, name, val, why)
}

// envInt reads an integer variable in [lo, hi].
func envInt(env map[string]string, name string, lo, hi int, required bool) (int, error) {
	v, ok := env[name]
	if !ok {
		if required {
			return 0, fmt.Errorf("%w: %s is not set", collectives.ErrInvalidArgument, name)
		}
		return lo, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, envErr(name, v, "not an integer")
	}
	if n < lo || n > hi {
		return 0, envErr(name, v, fmt.Sprintf("out of range [%d,%d]", lo, hi))
	}
	return n, nil
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s)%2 == 0
}

// parseHostPort reads "host:port" (IPv6 in brackets).
func parseHostPort(s string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("want host:port: %v", err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return netip.AddrPort{}, fmt.Errorf("port %q: want [1,65535]", port)
	}
	a, err := resolveHost(host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, uint16(p)), nil
}

// resolveHost accepts an IP or "localhost"; other names go through the
// resolver (a node's own hostname usually resolves locally).
func resolveHost(h string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return netip.Addr{}, fmt.Errorf("address zones are not supported")
		}
		return a.Unmap(), nil
	}
	if h == "" {
		return netip.Addr{}, fmt.Errorf("empty host")
	}
	if h == "localhost" {
		return netip.MustParseAddr("127.0.0.1"), nil
	}
	addrs, err := net.LookupHost(h)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("cannot resolve host %q: %v", h, err)
	}
	for _, s := range addrs {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
			return a, nil
		}
	}
	a, err := netip.ParseAddr(addrs[0])
	if err != nil {
		return netip.Addr{}, err
	}
	return a.Unmap(), nil
}

// environ returns the process environment as a map.
func environ() map[string]string {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// jobTokenFor gives the Unix socket token of an env-started job: the
// launcher's token, else one derived from what every rank knows.
func jobTokenFor(info EnvInfo) string {
	seed := "goccl-job:" + info.Token + "|" + info.JobKey + "|" + info.Addr.String() + "|" + strconv.Itoa(info.Size)
	sum := sha256.Sum256([]byte(seed))
	return hex.EncodeToString(sum[:16])
}
