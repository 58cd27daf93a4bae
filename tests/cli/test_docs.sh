#!/bin/sh
# The defaults in docs/channels.md are the code's: every row of the
# library's table is what `ivshm config` prints, and every row of the MPI
# component's table is what ompi_info reports for the built component; the
# same for docs/verbs.md and docs/collectives.md.
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
. "$s/tests/cli/lib.sh"
doc="$s/docs/channels.md"
pass=0 fail=0
"$b/libivshm/tools/ivshm" config | grep '^| `IVSHM_' >/tmp/ivshm-config.$$
n=$(wc -l </tmp/ivshm-config.$$)
docrows=$(grep -c '^| `IVSHM_' "$doc")
if [ "$n" -gt 0 ] && [ "$n" = "$docrows" ] && grep -qxFf /tmp/ivshm-config.$$ "$doc" &&
   [ "$(grep -cxFf /tmp/ivshm-config.$$ "$doc")" = "$n" ]; then
    pass=$((pass + 1)); echo "ok: docs/channels.md has the library's $n defaults"
else
    fail=$((fail + 1)); echo "FAIL: the library defaults in docs/channels.md differ from 'ivshm config':"
    diff /tmp/ivshm-config.$$ "$(grep '^| `IVSHM_' "$doc" >/tmp/ivshm-doc.$$; echo /tmp/ivshm-doc.$$)"
fi
rm -f /tmp/ivshm-config.$$ /tmp/ivshm-doc.$$
so="$b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so"
if [ -f "$so" ] && command -v ompi_info >/dev/null; then
    sys=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed 's/^path:pkglibdir://')
    info=$(OMPI_MCA_mca_base_component_path="$(dirname "$so"):$sys" \
        ompi_info --param btl ivshmem --level 9 --parsable 2>/dev/null)
    rows=0 bad=0
    for row in $(sed -n 's/^| `\(btl_ivshmem_[a-z_]*\)` | \([0-9]*\) |$/\1=\2/p' "$doc"); do
        rows=$((rows + 1))
        name=${row%%=*} want=${row#*=}
        got=$(printf '%s\n' "$info" | sed -n "s/^mca:btl:ivshmem:param:$name:value://p")
        [ "$got" = "$want" ] || { bad=$((bad + 1)); echo "FAIL: $name: docs $want, ompi_info '$got'"; }
    done
    if [ "$rows" -gt 0 ] && [ "$bad" = 0 ]; then
        pass=$((pass + 1)); echo "ok: docs/channels.md has the MPI component's $rows defaults"
    else
        fail=$((fail + 1))
    fi
    # docs/verbs.md: the verbs route's single-valued defaults
    if printf '%s\n' "$info" | grep -q "param:btl_ivshmem_verbs:value"; then
        rows=0 bad=0
        for row in $(sed -n 's/^| `\(btl_ivshmem_verbs[a-z_]*\)` | \(-\{0,1\}[0-9][0-9]*\) | .*/\1=\2/p' "$s/docs/verbs.md"); do
            rows=$((rows + 1))
            name=${row%%=*} want=${row#*=}
            got=$(printf '%s\n' "$info" | sed -n "s/^mca:btl:ivshmem:param:$name:value://p")
            [ "$got" = "$want" ] || { bad=$((bad + 1)); echo "FAIL: $name: docs/verbs.md $want, ompi_info '$got'"; }
        done
        if [ "$rows" -ge 8 ] && [ "$bad" = 0 ]; then
            pass=$((pass + 1)); echo "ok: docs/verbs.md has the verbs route's $rows defaults"
        else
            fail=$((fail + 1)); echo "FAIL: docs/verbs.md: $rows rows, $bad differ"
        fi
    else
        not_checked "docs/verbs.md (component built without its verbs route)"
    fi
else
    not_checked "docs/channels.md MPI defaults (MPI component not built)"
fi
# docs/collectives.md: coll ivshmem's single-valued defaults
so="$b/mpi-plugin/coll/.libs/mca_coll_ivshmem.so"
if [ -f "$so" ] && command -v ompi_info >/dev/null; then
    sys=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed 's/^path:pkglibdir://')
    info=$(OMPI_MCA_mca_base_component_path="$(dirname "$so"):$sys" \
        ompi_info --param coll ivshmem --level 9 --parsable 2>/dev/null)
    rows=0 bad=0
    for row in $(sed -n 's/^| `\(coll_ivshmem_[a-z_]*\)` | \([0-9a-z][0-9a-z]*\) | .*/\1=\2/p' "$s/docs/collectives.md"); do
        rows=$((rows + 1))
        name=${row%%=*} want=${row#*=}
        got=$(printf '%s\n' "$info" | sed -n "s/^mca:coll:ivshmem:param:$name:value://p")
        [ "$got" = "$want" ] || { bad=$((bad + 1)); echo "FAIL: $name: docs/collectives.md $want, ompi_info '$got'"; }
    done
    if [ "$rows" -ge 9 ] && [ "$bad" = 0 ]; then
        pass=$((pass + 1)); echo "ok: docs/collectives.md has coll ivshmem's $rows defaults"
    else
        fail=$((fail + 1)); echo "FAIL: docs/collectives.md: $rows rows, $bad differ"
    fi
else
    not_checked "docs/collectives.md (coll ivshmem not built)"
fi
finish
