from attnwh.cli import main

main()
