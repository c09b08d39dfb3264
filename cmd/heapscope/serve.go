package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heapscope/heapscope/query"
	"github.com/heapscope/heapscope/symbolize"
	"github.com/heapscope/heapscope/web"
)

func init() {
	register(&command{
		name:    "serve",
		args:    "[flags] FILE [--base FILE2] | --session NAME",
		summary: "explore a trace in a web browser: timeline, windows, flame graphs, sites",
		help: `
serve reads the trace as 'heapscope report' does, prints the URL, and builds
an index of every block's lifetime behind it (windows, instants and the AIFI
class answer once it is built; the page says "indexing"). It serves one page
that explores the trace:
the summary, the heap over time (drag to select a window that filters every
view), flame graphs by any cost, the functions table with each function's
callers and callees, the sites tables, the four lifetime classes of the window
(AIFI, AIFO, AOFI, AOFO) and the histograms.
The page's assets are in the binary: nothing is fetched from the network.
The JSON API behind it, under /api/, is documented in web/API.md.

--base FILE2 compares the trace with another (of the same program, say before
a change): the Diff view gives each site's cost in both, the sites matched by
their symbolized frames as 'heapscope diff' matches them, not their addresses.

--pid, --exe, --suppressions and --no-default-suppressions select processes
and suppress leaks as they do for 'heapscope report': every view, of the whole
trace or of a window, is of the processes selected, and leaks a rule matches
are counted as suppressed, not as leaks.

--session NAME follows a running session instead of a file: every second the
session is flushed and its trace file indexed again, and the page updates
itself without reloading; when the session ends, the page stays on its last
state. Each update reads the whole file again.

The index is written once, mode 0600, to heapscope's cache folder
($XDG_CACHE_HOME/heapscope/index, else ~/.cache/heapscope/index), named by the
trace's path, inode, size and modification time and the processes selected;
the next serve of the same trace reads it instead of building it (a changed
trace gets a new one; a damaged or foreign file is built again). Its size is
about 32 bytes per block (a heap event has no record of its own). The folder keeps the most
recently used index files up to 2 GiB (or a quarter of the free space, if less), or
HEAPSCOPE_INDEX_CACHE_MAX bytes (512M, 4G, ...). --no-index-cache neither reads
nor writes an index file.

The URL is the first line of standard output. It holds a secret of this run
(?token=...): the page trades it for a cookie, and answers no one without
one or the other (a script sends "Authorization: Bearer TOKEN"), nor a
request naming another host or coming from another web site. It listens on
loopback, on a free port, unless --listen says otherwise; an address other
machines can reach needs --allow-remote (the page is plain HTTP: whoever sees
the URL on the network reads the trace). It serves until Ctrl-C.`,
		setup: func(fs *flag.FlagSet) func([]string) error {
			var lf loadFlags
			lf.register(fs)
			var sf serveFlags
			fs.StringVar(&sf.listen, "listen", "127.0.0.1:0", "address to listen on (host:port)")
			fs.BoolVar(&sf.remote, "allow-remote", false, "let --listen be an address other machines can reach (plain HTTP: anyone who sees the URL reads the trace)")
			base := fs.String("base", "", "a trace to compare with")
			session := fs.String("session", "", "follow this running session instead of a file")
			noCache := fs.Bool("no-index-cache", false, "neither read nor write an index file: build the index every time")
			return func(args []string) error {
				if *session != "" {
					if len(args) != 0 || *base != "" {
						return usagef("--session takes no trace file and no --base")
					}
					ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
					defer stop()
					o, err := lf.queryOptions()
					if err != nil {
						return err
					}
					return serveLive(ctx, os.Stdout, sf, *session, o)
				}
				if len(args) != 1 {
					return usagef("want one trace file")
				}
				if lf.from.set || lf.to.set {
					return usagef("serve reads the whole trace: select a window in the page")
				}
				o, err := lf.queryOptions()
				if err != nil {
					return err
				}
				if !*noCache {
					// Without a cache folder (no home), the index stays in memory.
					o.CacheDir, _ = query.DefaultCacheDir()
				}
				// HEAPSCOPE_INDEX_MAP=always|never|auto: map the index file
				// or read it (auto: mapped when large against memory).
				if o.IndexMap, err = query.ParseIndexMap(os.Getenv("HEAPSCOPE_INDEX_MAP")); err != nil {
					return err
				}
				// Checked here: the index file is written after the page is up.
				if _, err := query.ParseCacheMax(os.Getenv(query.CacheMaxEnv)); err != nil {
					return err
				}
				ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				return serve(ctx, os.Stdout, sf, args[0], *base, o)
			}
		},
	})
}

// serveFlags say where serve listens.
type serveFlags struct {
	listen string
	remote bool // --allow-remote
}

// listenOn listens where f says, and warns of an address other machines can
// reach.
func (f serveFlags) listenOn() (net.Listener, error) {
	l, err := web.Listen(f.listen, f.remote)
	if err != nil {
		return nil, err
	}
	if !web.Loopback(l.Addr()) {
		fmt.Fprintf(os.Stderr, "heapscope: warning: serving on %s, which other machines can reach: the page is plain HTTP, and anyone who sees its URL (with its token) on the network can read the trace\n", l.Addr())
	}
	return l, nil
}

// serve listens first (a port in use fails at once, before the trace is
// read), reads path (and base, unless "") as the report does, prints the
// URL and serves until ctx ends, while the windowed indexes are built
// behind (see query.Open).
func serve(ctx context.Context, stdout io.Writer, sf serveFlags, path, base string, o query.Options) error {
	l, err := sf.listenOn()
	if err != nil {
		return err
	}
	defer l.Close()
	x, err := openShown(ctx, path, o)
	if err != nil {
		return err
	}
	var bx *query.Index
	if base != "" {
		if bx, err = openShown(ctx, base, o); err != nil {
			return err
		}
	}
	return serveOn(ctx, stdout, sf, l, web.NewWithBase(x, bx))
}

// openShown opens path (query.Open) with progress on standard error when
// it is a terminal: the report's pass, then the windowed index built
// behind it while the page is served. It prints the trace's warnings, and
// why the index could not be built if it could not.
func openShown(ctx context.Context, path string, o query.Options) (*query.Index, error) {
	p := startProgress("reading", path)
	o.ReadProgress = p.counter()
	// The index's reads begin inside Open; its meter starts once the first
	// pass's is done, with what was read before it.
	var early atomic.Int64
	var ip atomic.Pointer[progress]
	if p != nil {
		o.IndexProgress = func(n int64) {
			if m := ip.Load(); m != nil {
				m.add(n)
			} else {
				early.Add(n)
			}
		}
	}
	x, err := query.Open(path, o)
	p.finish()
	if err != nil {
		return nil, err
	}
	for _, w := range x.Warnings {
		fmt.Fprintf(os.Stderr, "heapscope: warning: %s: %s\n", path, w)
	}
	m := startProgress("indexing", path)
	m.add(early.Load())
	ip.Store(m)
	go func() {
		err := x.Wait(ctx)
		m.finish()
		if err != nil && ctx.Err() == nil && !errors.Is(err, query.ErrNotIndexed) {
			fmt.Fprintf(os.Stderr, "heapscope: %v (windows cannot be answered)\n", err)
		}
	}()
	return x, nil
}

// serveLive is serve --session: the index follows the session.
func serveLive(ctx context.Context, stdout io.Writer, sf serveFlags, name string, o query.Options) error {
	l, err := sf.listenOn()
	if err != nil {
		return err
	}
	defer l.Close()
	live, err := web.NewLive(name, o, time.Second)
	if err != nil {
		return err
	}
	go live.Run(ctx)
	return serveOn(ctx, stdout, sf, l, live)
}

// serveOn prints the URL of l, with its token, and serves h on it, behind
// a web.Guard, until ctx ends.
func serveOn(ctx context.Context, stdout io.Writer, sf serveFlags, l net.Listener, h http.Handler) error {
	var names []string
	if host, _, err := net.SplitHostPort(sf.listen); err == nil && host != "" && net.ParseIP(host) == nil {
		names = append(names, host) // the name --listen gave
	}
	g, err := web.NewGuard(h, l.Addr(), names...)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, g.URL())
	return web.Serve(ctx, l, g)
}

// writeHTMLReport is `report --format html`: the page of serve, as one
// file, for the whole trace, from the report's pass alone (no window
// index: one read of the trace, no row per block in memory).
func writeHTMLReport(lf *loadFlags, path string, out output) error {
	if lf.from.set || lf.to.set {
		return usagef("--format html reports the whole trace: use 'heapscope serve' for windows")
	}
	o, err := lf.queryOptions()
	if err != nil {
		return err
	}
	o.NoIndex = true
	x, err := query.Open(path, o)
	if err != nil {
		return err
	}
	for _, w := range x.Warnings {
		fmt.Fprintf(os.Stderr, "heapscope: warning: %s: %s\n", path, w)
	}
	return writeOutput(out, func(w io.Writer) error { return web.WriteHTML(w, x) })
}

// queryOptions are the index's options from the flags report shares with
// serve: the symbolizer's, the processes selected (--pid, --exe) and the
// suppressions.
func (f *loadFlags) queryOptions() (query.Options, error) {
	rules, err := f.rules()
	if err != nil {
		return query.Options{}, err
	}
	return query.Options{
		Symbolize:    symbolize.Options{DebugDirs: f.debugDirs, Sysroot: f.sysroot},
		Processes:    f.processes(),
		Suppressions: rules,
	}, nil
}
