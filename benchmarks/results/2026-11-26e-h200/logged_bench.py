"""bench_offload.py with offload_pass's INFO log timestamped and a stack dump every DUMP s (where a compile spends its time)."""
import faulthandler, logging, os, sys, time
sys.path.insert(0, "benchmarks")
T0 = time.perf_counter()
class F(logging.Formatter):
    def format(self, r):
        return f"[{time.perf_counter() - T0:7.1f}] {r.getMessage()[:400]}"
h = logging.StreamHandler(sys.stdout); h.setFormatter(F())
lg = logging.getLogger("offload_pass"); lg.setLevel(logging.INFO); lg.addHandler(h); lg.propagate = False
dump = int(os.environ.get("DUMP", "0"))
if dump:
    os.makedirs(os.environ["OUT"], exist_ok=True); faulthandler.dump_traceback_later(dump, repeat=True, file=open(os.environ["OUT"] + "/stacks.txt", "w"))
faulthandler.enable(file=sys.stderr, all_threads=False)
import bench_offload
sys.argv = ["bench_offload.py"] + sys.argv[1:]
bench_offload.main()
