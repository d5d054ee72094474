import sys,json
name=sys.argv[1]; d='/tmp/gw7/runs/'
a={l.split()[0]:l.split() for l in open(f'{d}{name}.t0')}
b={l.split()[0]:l.split() for l in open(f'{d}{name}.t1')}
row=json.load(open(f'{d}{name}.json'))['rows'][0]
fr=row['frames_per_s']*15
print(name, 'us/frame', round(1e6*row['cpu_cores']/row['frames_per_s']), 'p99', row['jitter']['p99_ms'], 'lag p99', row['loop_lag']['p99_ms'], 'wakeups/s', round(row['pacer_wakeups_per_s']))
for k in b:
    if k in a:
        d=int(b[k][2])-int(a[k][2])
        if d: print(f"  {b[k][1]:16s} {d*10000/fr:7.1f} us/frame (user {(int(b[k][3])-int(a[k][3]))*10000/fr:.1f}, sys {(int(b[k][4])-int(a[k][4]))*10000/fr:.1f})  csw vol {int(b[k][5])-int(a[k][5])} invol {int(b[k][6])-int(a[k][6])}")
try:
    s0=[int(x) for x in open(f'/tmp/gw7/runs/{name}.s0').read().split()[1:]]; s1=[int(x) for x in open(f'/tmp/gw7/runs/{name}.s1').read().split()[1:]]
    dd=[b-a for a,b in zip(s0,s1)]; tot=sum(dd)
    print(f"  cpu0 over 15 s: user+nice {100*(dd[0]+dd[1])/tot:.0f}% sys {100*dd[2]/tot:.0f}% idle {100*dd[3]/tot:.0f}% softirq {100*dd[6]/tot:.0f}% steal {100*dd[7]/tot:.0f}%")
except FileNotFoundError: pass
