package launcher

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Names of the environment contract between the launcher and comm.
const (
	EnvMasterAddr     = "MASTER_ADDR"      // the rendezvous host
	EnvMasterPort     = "MASTER_PORT"      // the rendezvous port
	EnvRank           = "RANK"             // this rank's number
	EnvWorldSize      = "WORLD_SIZE"       // the job's number of ranks
	EnvLocalRank      = "LOCAL_RANK"       // the rank's number on its node
	EnvLocalWorldSize = "LOCAL_WORLD_SIZE" // the number of ranks on the node
	EnvCommID         = "GOCCL_COMM_ID"    // host:port of the rendezvous
	EnvJobToken       = "GOCCL_JOB_TOKEN"  // the job's secret, 32 hex characters
)

// foreignIdentity lists other launchers' rank variables. A rank started by
// goccl run inside, say, an mpirun job must not see two identities.
var foreignIdentity = []string{
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
	"PMI_RANK", "PMI_SIZE",
	"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
	"GROUP_RANK", "ROLE_RANK",
}

// RankEnv returns base with the contract for rank of np added; variables
// of the contract and foreign identities already in base are replaced.
func RankEnv(base []string, addr string, port, rank, np int, token string) []string {
	drop := make(map[string]bool, len(foreignIdentity)+8)
	for _, k := range foreignIdentity {
		drop[k] = true
	}
	for _, k := range []string{EnvMasterAddr, EnvMasterPort, EnvRank, EnvWorldSize,
		EnvLocalRank, EnvLocalWorldSize, EnvCommID, EnvJobToken} {
		drop[k] = true
	}
	out := make([]string, 0, len(base)+8)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			out = append(out, kv)
		}
	}
	p := strconv.Itoa(port)
	return append(out,
		EnvMasterAddr+"="+addr,
		EnvMasterPort+"="+p,
		EnvRank+"="+strconv.Itoa(rank),
		EnvWorldSize+"="+strconv.Itoa(np),
		EnvLocalRank+"="+strconv.Itoa(rank),
		EnvLocalWorldSize+"="+strconv.Itoa(np),
		EnvCommID+"="+net.JoinHostPort(addr, p),
		EnvJobToken+"="+token,
	)
}

// NewToken returns 32 random hex characters.
func NewToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("job token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// FreePort asks the kernel for a free TCP port on addr. Rank 0 binds it a
// moment later; another process could take it first, which rank 0 then
// reports as a bind error (torchrun and mpirun live with the same race).
func FreePort(addr string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", addr, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
