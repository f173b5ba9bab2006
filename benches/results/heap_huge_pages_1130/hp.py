# Alternating runs of `analyze` with the heap's huge pages asked for (the default) and refused
# (glibc.malloc.hugetlb=0), each default run sorted by whether glibc took the tunable (--timings
# says how much memory was advised). Usage: hp.py BIN N OUTDIR [extra args] -- FILES
import subprocess, time, os, sys, statistics, shutil, re
B=sys.argv[1]; n=int(sys.argv[2]); outdir=sys.argv[3]
rest=sys.argv[4:]; k=rest.index('--'); extra=rest[:k]; files=rest[k+1:]
res={}
for r in range(n):
    for f in files:
        for mode in ['default','off']:
            env=dict(os.environ)
            if mode=='off': env['GLIBC_TUNABLES']='glibc.malloc.hugetlb=0'
            shutil.rmtree(outdir,ignore_errors=True)
            t=time.perf_counter()
            p=subprocess.run([B,'analyze',f,'--out',outdir,'--timings']+extra,env=env,capture_output=True,text=True)
            w=time.perf_counter()-t
            m=re.search(r'advised for huge pages: (\d+) KiB',p.stderr)
            adv=int(m.group(1)) if m else -1
            key=(os.path.basename(f),mode if mode=='off' else ('hp-took' if adv>0 else 'hp-failed'))
            res.setdefault(key,[]).append(w)
for k in sorted(res):
    v=sorted(res[k]); q=statistics.quantiles(v,n=4) if len(v)>1 else [v[0]]*3
    print(f"{' '.join(extra) or 'default':6} {k[0]:28} {k[1]:10} n={len(v):3} median {statistics.median(v):.3f} q1 {q[0]:.3f} q3 {q[2]:.3f}", flush=True)
