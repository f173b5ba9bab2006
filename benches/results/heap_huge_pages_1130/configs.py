# Alternating rounds of `analyze` (default command, -j 2) over each input with three set-ups:
# the build before the retry ("before": glibc may leave the tunable untaken), the build with it
# ("after"), and the build with it but huge pages refused (GLIBC_TUNABLES=glibc.malloc.hugetlb=0,
# "off"). Per set-up and input: median wall, quartiles, the paired ratio to plain in the same
# round and set-up, and how often the heap was advised (--timings).
# Usage: configs.py ROUNDS BEFORE_BIN AFTER_BIN PLAIN [OTHER INPUTS...]
import subprocess, time, os, sys, statistics, shutil, re
n=int(sys.argv[1]); before, after = sys.argv[2], sys.argv[3]; files=sys.argv[4:]
setups=[('before',before,{}),('after',after,{}),('off',after,{'GLIBC_TUNABLES':'glibc.malloc.hugetlb=0'})]
res={}; took={}
for r in range(n):
    for name,b,extra in setups:
        for f in files:
            env=dict(os.environ); env.pop('GLIBC_TUNABLES',None); env.update(extra)
            shutil.rmtree('/tmp/o_cfg',ignore_errors=True)
            t=time.perf_counter()
            p=subprocess.run([b,'analyze','-j','2',f,'--out','/tmp/o_cfg','--timings'],env=env,capture_output=True,text=True,check=True)
            w=time.perf_counter()-t
            m=re.search(r'advised for huge pages: (\d+) KiB',p.stderr)
            res.setdefault((name,f),[]).append(w)
            took.setdefault((name,f),[]).append(bool(m and int(m.group(1))>0))
for name,_,_ in setups:
    base=res[(name,files[0])]
    for f in files:
        v=res[(name,f)]; q=statistics.quantiles(v,n=4)
        ratio=[x/y for x,y in zip(v,base)]
        print(f"{name:7} {os.path.basename(f):26} median {statistics.median(v):.3f} s (q {q[0]:.3f}-{q[2]:.3f})  x plain paired {statistics.median(ratio):.3f}  heap advised in {sum(took[(name,f)])}/{len(v)}", flush=True)
