# Alternating runs of two builds on one input: the --timings parse stage ("reading and
# parsing", wall and CPU) and the whole run's wall time, lean command (--no-plots
# --no-annotated-trace, so only the read differs), -j 2. Usage: stages.py N INPUT NAME=BIN...
import subprocess, time, sys, re, statistics, shutil
n=int(sys.argv[1]); inp=sys.argv[2]; builds=[a.split('=',1) for a in sys.argv[3:]]
res={name:{'parse':[], 'cpu':[], 'wall':[]} for name,_ in builds}
for _ in range(n):
    for name,b in builds:
        shutil.rmtree('/tmp/o_stage',ignore_errors=True)
        t=time.perf_counter()
        p=subprocess.run([b,'analyze','-j','2','--no-plots','--no-annotated-trace','--timings',inp,'--out','/tmp/o_stage'],capture_output=True,text=True,check=True)
        w=time.perf_counter()-t
        m=re.search(r'reading and parsing: ([\d.]+) s \(([\d.]+) s CPU',p.stderr)
        res[name]['parse'].append(float(m.group(1))); res[name]['cpu'].append(float(m.group(2))); res[name]['wall'].append(w)
for name,_ in builds:
    r=res[name]; q=statistics.quantiles(r['parse'],n=4)
    print(f"{name:8} {inp.split('/')[-1]:30} parse stage median {statistics.median(r['parse']):.3f} s (q {q[0]:.3f}-{q[2]:.3f}), CPU {statistics.median(r['cpu']):.3f} s; lean run {statistics.median(r['wall']):.3f} s", flush=True)
