import re,sys,statistics as st
d=sys.argv[1]; rounds=int(sys.argv[2])
def dur(s):
    m=re.match(r'([0-9.]+)(µs|ms|s)',s); return float(m.group(1))*{'µs':1,'ms':1e3,'s':1e6}[m.group(2)]
def get(f):
    t=open(f).read()
    m=re.search(r'p99 (\S+),',t); r=re.search(r'RSS peak: ([0-9.]+)',t); fl=re.search(r'(\d+) replies \(([0-9.]+) MB\).* (\d+) of \d+ disc',t)
    c=re.search(r'clients ([0-9.]+) µs',t)
    return dur(m.group(1)), float(r.group(1)), fl.groups() if fl else None, float(c.group(1)) if c else 0
for arm in sys.argv[3:]:
    ratios=[];rss=[];fl=[];cc=[]
    for r in range(1,rounds+1):
        h=get(f'{d}/hostile-{arm}-{r}.txt'); b=get(f'{d}/rate-gotp-{r}.txt')
        ratios.append(h[0]/b[0]); rss.append(h[1]); fl.append(h[2]); cc.append(h[3])
    print(arm,'p99 ratio',' · '.join('%.2f'%x for x in ratios),'median %.2f'%st.median(ratios),'RSS max %.1f'%max(rss),'client cpu/msg med %.0f'%st.median(cc), fl[:3])
