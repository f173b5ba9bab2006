import subprocess, time, statistics, sys
st="/work/main/target/release/steptrace"
runs=int(sys.argv[1]); lean = sys.argv[2]=="lean"; files=sys.argv[3:]
res={f:[] for f in files}
for _ in range(runs):
    for i,f in enumerate(files):
        cmd=[st,"analyze","-q","-j","2","--out",f"/tmp/o_pair{i}{'l' if lean else ''}"]+(["--no-plots","--no-annotated-trace"] if lean else [])+[f]
        t0=time.perf_counter(); subprocess.run(cmd,check=True); res[f].append(time.perf_counter()-t0)
base=res[files[0]]
for f in files:
    r=[x/y for x,y in zip(res[f],base)]
    q=statistics.quantiles(r,n=4)
    print(f"{f.split('/')[-1]:32s} median {statistics.median(res[f]):.3f} s  x plain: median-of-medians {statistics.median(res[f])/statistics.median(base):.3f}  paired median {statistics.median(r):.3f} (quartiles {q[0]:.2f}-{q[2]:.2f})")
