import statistics as s,glob,re,sys
D=sys.argv[1]; base=sys.argv[2]
d={}
for f in glob.glob(D+'/r*-*.txt'):
    m=re.match(r'.*/r(\d+)-(\w+)\.txt',f); r,v=int(m.group(1)),m.group(2)
    for l in open(f):
        if l.startswith('conn '):
            x=l.split()[3:]
            d.setdefault(v,{})[r]=dict(zip(['p50','p99','cps','vcsw','wake','cgo','allocs','cpu'],map(float,x)))
a=d[base]
order=sys.argv[3].split()
print('%-8s %6s %6s %6s %6s %6s %6s'%('rev','p50','p50/b','cps/b','cpu/b','cgo/b','wins'))
for v in order:
    b=d[v]; rs=[r for r in b if r in a]
    pr=lambda k:s.median(b[r][k]/a[r][k] for r in rs)
    print('%-8s %6.1f %6.3f %6.3f %6.3f %6.3f %3d/%d'%(v,s.median(b[r]['p50'] for r in rs),pr('p50'),pr('cps'),pr('cpu'),pr('cgo'),sum(1 for r in rs if b[r]['p50']<a[r]['p50']),len(rs)))
