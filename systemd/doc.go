// Package systemd owns meshd's side of the service manager: readiness,
// watchdog and the unit files beside it.
//
// # Notifications
//
// A Notifier speaks the sd_notify(3) protocol: each call is one datagram
// of newline-separated assignments written to the unix socket named by
// $NOTIFY_SOCKET (a leading '@' names the abstract namespace). The
// vocabulary and the CLOCK_MONOTONIC stamp come from go-systemd's daemon
// package; the datagram is written here because daemon.SdNotify reads the
// environment itself, and a Notifier takes its environment from the
// caller (os.Getenv in production, a map in tests). Without
// $NOTIFY_SOCKET (started by hand, by a test, under another supervisor)
// every method is a no-op that returns nil.
//
// meshd.service runs `meshd serve` as Type=notify with NotifyAccess=main:
// the daemon calls Ready once it listens on its TCP address and unix
// socket, Reloading and then Ready again around a SIGHUP reload, Stopping
// when SIGTERM starts the drain, and runs Watchdog for the life of the
// process. Only the main process may notify, so the engine subprocess,
// which inherits $NOTIFY_SOCKET, cannot alter the service's state.
//
// # Watchdog
//
// With WatchdogSec= set, systemd passes $WATCHDOG_USEC (and $WATCHDOG_PID,
// the process it is meant for) and kills the service with SIGABRT, then
// restarts it (Restart=on-failure), when no WATCHDOG=1 arrives within that
// interval. Watchdog pings every half interval, but only after the caller's
// liveness check passes: a daemon whose goroutines still run but whose
// serve path is wedged stops pinging and is restarted, instead of being
// kept alive by a ticker that proves nothing.
//
// # Unit files
//
// The files beside this package (meshd.service, meshd.sysusers,
// meshd-powercap.conf, 99-meshd.rules, 99-meshd-powercap.rules) are
// installed by `make install` and checked by scripts/check-systemd.sh;
// README.md in this folder explains each hardening line.
package systemd
