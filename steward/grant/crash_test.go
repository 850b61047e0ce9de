package grant_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"meshd/agent"
	"meshd/steward/grant"
	"meshd/wire"
)

// crashEnv, when set, makes the test binary a crash-test child serving in
// the directory it names until it is killed.
const crashEnv = "MESHD_GRANT_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		if err := crashChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// crashChild opens the stack (recovering whatever the last kill left),
// says "ready", and serves granted requests from several goroutines until
// it is killed. Every fifth request asks for a floor no backend meets, so
// failed serves release holds too.
func crashChild(dir string) error {
	env, err := os.ReadFile(filepath.Join(dir, "grant.cose"))
	if err != nil {
		return err
	}
	o, err := grant.Inspect(env) // the issuer to trust is the one it names
	if err != nil {
		return err
	}
	s, err := openStack(dir, stackOptions{trusted: []ed25519.PublicKey{o.Issuer}, work: 300})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	run := rand.Uint64()
	errs := make(chan error)
	for w := 0; w < 6; w++ {
		go func() {
			for i := 0; ; i++ {
				floor := wire.F1
				if i%5 == 4 {
					floor = wire.F4
				}
				req, prompt := request(fmt.Sprintf("%x-%d-%d", run, w, i), floor)
				_, err := s.agent.ServeGranted(context.Background(), req, prompt, env)
				if err != nil && !errors.Is(err, grant.ErrBudgetExhausted) && !(floor == wire.F4 && errors.Is(err, agent.ErrNoRoute)) {
					errs <- err
					return
				}
			}
		}()
	}
	return <-errs
}

func TestCrashRecovery(t *testing.T) {
	issuer := key(t, 1)
	dir := t.TempDir()
	g := base()
	g.AnyRequest = true
	// Enough for the whole test at first; the later rounds run it dry, so
	// crashes also land while serves are being refused.
	const budget = 600 * chargeUJ
	g.BudgetUJ = budget
	gr := issue(t, issuer, g)
	if err := os.WriteFile(filepath.Join(dir, "grant.cose"), gr.Envelope, 0o644); err != nil {
		t.Fatal(err)
	}
	trusted := []ed25519.PublicKey{issuer.Public()}
	rng := rand.New(rand.NewPCG(1, 2))
	const rounds = 20
	var recovered, lastReceipts int
	deadline := time.Now().Add(20 * time.Second)
	for round := 0; round < rounds && time.Now().Before(deadline); round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Most rounds kill a serving child; every fourth kills it at a
		// random point of its start-up, recovery included.
		if round%4 == 3 {
			time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		} else {
			ready := make(chan bool, 1)
			go func() {
				line, _ := bufio.NewReader(out).ReadString('\n')
				ready <- line == "ready\n"
			}()
			select {
			case ok := <-ready:
				if !ok {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("round %d: the child did not come up", round)
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("round %d: the child did not come up in 10 s", round)
			}
			time.Sleep(time.Duration(5+rng.IntN(60)) * time.Millisecond)
		}
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		err = cmd.Wait()
		if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != -1 {
			t.Fatalf("round %d: the child ended on its own (%v) instead of being killed", round, err)
		}

		s, err := openStack(dir, stackOptions{trusted: trusted})
		if err != nil {
			t.Fatalf("round %d: restart: %v", round, err)
		}
		recovered += s.rec.Settled + s.rec.Released + s.rec.Corrected
		sum, receipts := debits(t, s, gr.ID) // also fails on a hold charged twice
		b, ok := s.led.Balance(gr.ID)
		if !ok && receipts > 0 {
			t.Fatalf("round %d: %d receipts but no ledger account", round, receipts)
		}
		if b.SpentUJ != sum {
			t.Fatalf("round %d: ledger spent %d µJ, receipts debit %d µJ", round, b.SpentUJ, sum)
		}
		if b.HeldUJ != 0 || b.OpenHolds != 0 {
			t.Fatalf("round %d: %d holds (%d µJ) still open after recovery", round, b.OpenHolds, b.HeldUJ)
		}
		if ok && b.RemainingUJ != budget-sum || sum > budget {
			t.Fatalf("round %d: remaining %d µJ, truly unspent %d µJ", round, b.RemainingUJ, budget-sum)
		}
		if receipts < lastReceipts {
			t.Fatalf("round %d: receipts went from %d to %d", round, lastReceipts, receipts)
		}
		lastReceipts = receipts
		t.Logf("round %d: %d receipts, spent %d µJ, recovery %+v", round, receipts, sum, *s.rec)
		if err := s.close(); err != nil {
			t.Fatal(err)
		}
	}
	if lastReceipts == 0 || recovered == 0 {
		t.Fatalf("the children sealed %d receipts and left %d holds to recover: the test exercised nothing", lastReceipts, recovered)
	}
}
