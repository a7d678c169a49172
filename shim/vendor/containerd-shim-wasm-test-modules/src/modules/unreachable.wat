(func $main (export "_start")
    (unreachable)
)
