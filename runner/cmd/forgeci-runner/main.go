// Command forgeci-runner is the ForgeCI runner agent.
//
//	forgeci-runner register --server URL --registration-token frg_... --name NAME --labels linux,x64 --token-file FILE
//	forgeci-runner run [--config FILE] [--server URL] [--token-file FILE] [--labels L] [--work-dir DIR] [--concurrency N]
//	                   [--isolation none|user|bwrap] [--slot-users U0,U1] [--memory-limit 4G] [--pids-limit N] [--cpu-limit 2] [--ephemeral [--max-idle 15m]]
//	forgeci-runner id-token --audience AUD [--socket PATH] [--json]   (in a step: prints an identity token)
//
// The config file holds key = value lines with the same names as the flags;
// flags win. On SIGTERM or SIGINT the runner stops claiming and finishes
// the jobs it has; a second signal stops them at once (their leases then
// expire and the jobs are recorded ABORTED).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/forgeci/forgeci/runner/agent"
	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/runner/isolate"
	"github.com/forgeci/forgeci/shared/domain"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: forgeci-runner register|run|id-token [flags]   (-h for flags)")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "register":
		err = register(os.Args[2:])
	case "run":
		err = run(os.Args[2:])
	case "id-token":
		err = idToken(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: use register, run or id-token", os.Args[1])
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "forgeci-runner:", err)
		if errors.Is(err, agent.ErrTokenRefused) {
			os.Exit(exitTokenRefused)
		}
		os.Exit(1)
	}
}

// exitTokenRefused is the exit status of a runner whose token the
// control plane refuses: the shipped units do not restart it
// (RestartPreventExitStatus), as it would only be refused again.
const exitTokenRefused = 3

func splitLabels(s string) []string {
	var out []string
	for _, l := range strings.Split(s, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func register(args []string) error {
	fs := flag.NewFlagSet("register", flag.ContinueOnError)
	server := fs.String("server", "", "control plane URL")
	reg := fs.String("registration-token", "", "one-time registration token from an admin")
	name := fs.String("name", hostname(), "runner name")
	labels := fs.String("labels", "linux", "comma-separated labels")
	tokenFile := fs.String("token-file", "forgeci-runner.token", "where to write the runner token (mode 0600)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *server == "" || *reg == "" {
		return errors.New("--server and --registration-token are required")
	}
	c := client.New(*server, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, token, err := c.Register(ctx, *reg, *name, splitLabels(*labels))
	if err != nil {
		return err
	}
	if err := os.WriteFile(*tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	fmt.Printf("registered runner %s (%s); token written to %s\n", *name, id, *tokenFile)
	return nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	config := fs.String("config", "", "config file of key = value lines")
	server := fs.String("server", "", "control plane URL")
	tokenFile := fs.String("token-file", "forgeci-runner.token", "file holding the runner token")
	labels := fs.String("labels", "", "comma-separated labels to claim with (default: all registered)")
	workDir := fs.String("work-dir", defaultWorkDir(), "where job workspaces live")
	concurrency := fs.Int("concurrency", 1, "jobs at once")
	grace := fs.Duration("kill-grace", 10*time.Second, "time between SIGTERM and SIGKILL of a stopped step")
	isolation := fs.String("isolation", string(isolate.DefaultMode()), "how steps are kept from the runner and each other: none, user (a user per slot; needs root) or bwrap (user, inside a bubblewrap sandbox)")
	slotUsers := fs.String("slot-users", "", "comma-separated users steps run as, one per slot (default forgeci-slot0,forgeci-slot1,...)")
	memory := fs.String("memory-limit", "", "memory of one job, such as 4G; 0: none (default: where the runner makes cgroups, the machine's memory less an eighth, at least 512 MiB, shared among the slots)")
	pids := fs.Int("pids-limit", -1, "processes (threads too) of one job; 0: none (default: where the runner makes cgroups, half the machine's PIDs shared among the slots, at most 8192 a job)")
	cpus := fs.Float64("cpu-limit", 0, "CPUs of one job, such as 1.5 (default: none)")
	ephemeral := fs.Bool("ephemeral", false, "run exactly one job, then exit (for throwaway machines)")
	maxIdle := fs.Duration("max-idle", 0, "with --ephemeral: exit if no job came within this long (0: wait forever)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *config != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if err := applyConfig(fs, *config, set); err != nil {
			return err
		}
	}
	if *server == "" {
		return errors.New("--server (or server in the config file) is required")
	}
	raw, err := os.ReadFile(*tokenFile)
	if err != nil {
		return fmt.Errorf("read token: %w (register first)", err)
	}
	if *maxIdle < 0 || *maxIdle > 0 && !*ephemeral {
		return errors.New("--max-idle is for --ephemeral runners, and not negative")
	}
	if *ephemeral && *concurrency != 1 {
		return errors.New("--ephemeral runs exactly one job: leave --concurrency at 1")
	}
	if *concurrency < 1 || *concurrency > 256 {
		return errors.New("--concurrency must be from 1 to 256")
	}
	lim, err := jobLimits(*memory, *pids, *cpus)
	if err != nil {
		return err
	}
	users := splitLabels(*slotUsers)
	if len(users) == 0 {
		for i := range *concurrency {
			users = append(users, fmt.Sprintf("forgeci-slot%d", i))
		}
	}
	iso, err := isolate.New(isolate.Config{Mode: isolate.Mode(*isolation), SlotUsers: users, Limits: lim,
		DefaultPids: *pids == -1, DefaultMemory: *memory == ""}, *concurrency)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	a := agent.New(agent.Config{Client: client.New(*server, strings.TrimSpace(string(raw))), Labels: splitLabels(*labels),
		WorkDir: *workDir, Concurrency: *concurrency, KillGrace: *grace, Log: log, Isolation: iso, Ephemeral: *ephemeral,
		MaxIdle: *maxIdle})
	ctx, stop := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		log.Info("stopping: no new jobs; finishing current ones (signal again to stop them)")
		stop()
		<-sigs
		log.Warn("stopping current jobs")
		a.Abort()
	}()
	log.Info("runner started", "server", *server, "concurrency", *concurrency, "work_dir", *workDir,
		"isolation", iso.Mode(), "ephemeral", *ephemeral, "job_pids_limit", iso.Limits().Pids, "job_memory_limit", iso.Limits().MemoryBytes)
	return a.Run(ctx)
}

// jobLimits are the flags' limits of every job (-1 pids and "" memory:
// the defaults, which isolate.New sets).
func jobLimits(memory string, pids int, cpus float64) (isolate.Limits, error) {
	lim := isolate.Limits{Pids: max(pids, 0), CPUs: cpus}
	if memory != "" && memory != "0" {
		var err error
		if lim.MemoryBytes, err = domain.ParseBytes(memory); err != nil {
			return lim, fmt.Errorf("--memory-limit %q: %w (0: none)", memory, err)
		}
	}
	if pids < -1 || lim.CPUs < 0 {
		return lim, errors.New("--pids-limit is a number of processes, 0 for none; --cpu-limit must not be negative")
	}
	return lim, nil
}

func applyConfig(fs *flag.FlagSet, path string, set map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"`)
		if !ok || fs.Lookup(k) == nil || k == "config" {
			return fmt.Errorf("%s:%d: expected key = value with a key among the flags, got %q", path, n, line)
		}
		if set[k] {
			continue
		}
		if err := fs.Set(k, v); err != nil {
			return fmt.Errorf("%s:%d: %s: %v", path, n, k, err)
		}
	}
	return sc.Err()
}

// defaultWorkDir is outside /tmp for root: under isolation each job has a
// /tmp of its own, so workspaces cannot live there.
func defaultWorkDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/forgeci-runner/work"
	}
	return filepath.Join(os.TempDir(), "forgeci-work")
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
