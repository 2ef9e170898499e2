import re,sys,glob,os
d=sys.argv[1]
def parse(f):
    out={}
    cur=None
    for line in open(f):
        m=re.match(r'\s+(rdmarpc(?:/stream)?)\s+rdma\s+(\S+)\s+conc 1\s+p50\s+([\d.]+) µs.*?(\d+) calls/s',line)
        if m:
            cur=(m.group(1),m.group(2)); out[cur]={'p50':float(m.group(3))}
            continue
        m=re.match(r'\s+per call, client / server process: CPU ([\d.]+) / ([\d.]+) µs',line)
        if m and cur: out[cur]['cpu']=(float(m.group(1)),float(m.group(2)))
        m=re.match(r'\s+(rdmarpc(?:/stream)?)\s+rdma\s+(\S+)\s+1\s+(\d+)\s+([\d.]+)\s',line)
        if m: out.setdefault((m.group(1),m.group(2)),{})['mbs']=float(m.group(4)); out[(m.group(1),m.group(2))]['cps']=int(m.group(3))
    return out
size={'64KiB':65536,'256KiB':256<<10,'1MiB':1<<20,'16MiB':16<<20}
for f in sorted(glob.glob(os.path.join(d,'rpcbench-rndv-*.txt'))):
    name=f.split('rpcbench-rndv-')[1][:-4]
    r=parse(f)
    for (impl,sz),v in sorted(r.items(), key=lambda kv:(kv[0][0],size[kv[0][1]])):
        n=size[sz]
        c=v.get('cpu',(0,0))
        # CPU per MiB of payload: an echo call moves the payload both ways (2n bytes)
        per=lambda x: x/(2*n/(1<<20))/1000
        print(f"{name:10s} {impl:15s} {sz:6s} p50 {v.get('p50',0)/1000:9.1f} ms  {v.get('mbs',0):6.2f} MB/s  cps {v.get('cps',0)}  cpu c/s {c[0]/1000:8.1f}/{c[1]/1000:8.1f} ms/call  = {per(c[0]):6.1f}/{per(c[1]):6.1f} ms per MiB moved")
